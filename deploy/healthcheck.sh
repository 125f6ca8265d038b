#!/bin/bash
# Container health probe, with nothing but bash and coreutils (the image has no client and
# `bulwark` has no probe subcommand).
#
#   bulwark-healthcheck router PORT   sends OP_MSG {ping: 1, $db: "admin"} and expects ok: 1.0
#                                     (ping needs no authentication, so no secret is involved)
#   bulwark-healthcheck tcp PORT      the port accepts a TCP connection (shard members: the
#                                     gRPC port; there is no unauthenticated gRPC health call)
set -euo pipefail
kind=${1:?router|tcp} port=${2:?port}
exec 3<>"/dev/tcp/127.0.0.1/$port"
[ "$kind" = tcp ] && exit 0

# Header: length 51, requestID 1, responseTo 0, opCode 2013 (OP_MSG); flags 0; section 0;
# BSON {ping: int32 1, $db: "admin"} (30 bytes).
printf '\x33\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xdd\x07\x00\x00\x00\x00\x00\x00\x00' >&3
printf '\x1e\x00\x00\x00\x10ping\x00\x01\x00\x00\x00\x02$db\x00\x06\x00\x00\x00admin\x00\x00' >&3
len=$(timeout 1 head -c 4 <&3 | od -An -tu4 | tr -d ' ')
[ -n "$len" ] && [ "$len" -gt 16 ] && [ "$len" -lt 65536 ] || { echo "no OP_MSG reply"; exit 1; }
reply=$(timeout 1 head -c $((len - 4)) <&3 | od -An -tx1 -v | tr -d ' \n')
# Element `ok` as the double 1.0: 01 'o' 'k' 00, then 1.0 little-endian.
case "$reply" in
  *016f6b00000000000000f03f*) exit 0 ;;
  *) echo "ping did not answer ok: 1"; exit 1 ;;
esac
