"""A metadata image a test extends record by record; each step reconciles a
:class:`BrokerCore` in controller mode against it (what the metadata follower does)."""

from __future__ import annotations

from broker.core import BrokerCore
from broker.metadata.image import MetadataImage
from broker.metadata.records import MetadataRecord


class ImageFeed:
    """A metadata image the test extends record by record, then reconciles."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.image = MetadataImage()
        self.offset = 0
        core.image = self.image

    def apply(self, *records: MetadataRecord) -> None:
        for record in records:
            self.image.apply(record, self.offset)
            self.offset += 1
        self.core.reconcile()
