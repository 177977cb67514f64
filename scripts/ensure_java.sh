#!/bin/sh
# Spark (the verification jobs) needs a Java runtime. Install Java 17 with apt-get only
# when no `java` is on PATH; do nothing otherwise. Used by the README's main command and
# by .ci/run.
set -eu
if command -v java >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "java is missing and apt-get is not available: install a Java 17 runtime" >&2
  exit 2
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless
