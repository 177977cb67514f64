"""Each API's request and response, declared once with :class:`~clients.protocol.api_keys.Api`.

Grouped by area: :mod:`.produce_fetch` (Produce, Fetch, ListOffsets,
OffsetsForLeaderEpoch, InitProducerId), :mod:`.metadata` (ApiVersions, Metadata, topic
administration, DescribeLogDirs), :mod:`.groups` (the group coordinator's APIs) and
:mod:`.controller` (broker <-> controller APIs) and :mod:`.transactions` (the
transaction coordinator's APIs, WriteTxnMarkers and the transaction admin APIs),
:mod:`.security` (ACL and SCRAM user admin APIs), :mod:`.replicas` (ElectLeaders) and
:mod:`.quorum` (the KRaft quorum APIs between controllers: Vote, BeginQuorumEpoch,
EndQuorumEpoch, DescribeQuorum).
Imports only :mod:`clients.protocol`'s schema modules.
"""
