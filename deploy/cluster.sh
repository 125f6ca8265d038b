#!/usr/bin/env bash
# The three-site docker-compose cluster: build its image, start it, wait until it is
# healthy, stop it. `make cluster-up` / `make cluster-down` call this.
#
#   deploy/cluster.sh up      base image (if missing), image, cluster key, compose up, wait
#   deploy/cluster.sh wait    wait until every container is healthy and the admin user exists
#   deploy/cluster.sh image   (re)build the bulwark image from the release binary
#   deploy/cluster.sh down    stop and remove the containers, networks and data volumes
#   deploy/cluster.sh key     make deploy/secrets/cluster-key if it does not exist
#   deploy/cluster.sh certs   make the cluster CA and member certificate in deploy/secrets/
#                             if they do not exist (mutual TLS between every node)
#   deploy/cluster.sh stranger  a container without the cluster's certificate is refused
#                             commands and Raft messages by a member (cluster must be up)
#   deploy/cluster.sh compose ARGS...   docker-compose with this project's file and name
#
# LAYOUT=replica-set (default: docker-compose.yml, one shard replica set, two members in
# site A, two in B, an arbiter in C) or LAYOUT=sharded (docker-compose.sharded.yml: config
# servers and two shards, a member of each per site). One layout runs at a time.
#
# Environment: BASE_IMAGE (bulwark-base:bookworm, built by build-base-image.sh when it is a
# bulwark-base image; debian:bookworm-slim with a registry), BULWARK_IMAGE (bulwark:local),
# BULWARK_BIN (default $CARGO_TARGET_DIR/release/bulwark, CARGO_TARGET_DIR defaulting to
# ./target), STRIP=0 to keep debug info in the image, WAIT_SECS (120), and the compose
# file's BULWARK_ADMIN_USER, BULWARK_ADMIN_PASSWORD, BULWARK_PORT_A/B/C, BULWARK_BIND,
# BULWARK_KEY_FILE.
set -euo pipefail

DEPLOY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$DEPLOY")
export BASE_IMAGE=${BASE_IMAGE:-bulwark-base:bookworm}
export BULWARK_IMAGE=${BULWARK_IMAGE:-bulwark:local}
BULWARK_BIN=${BULWARK_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/bulwark}
WAIT_SECS=${WAIT_SECS:-120}
PROJECT=bulwark
case "${LAYOUT:-replica-set}" in
  replica-set) COMPOSE_FILE=$DEPLOY/docker-compose.yml ;;
  sharded) COMPOSE_FILE=$DEPLOY/docker-compose.sharded.yml ;;
  *) echo "LAYOUT must be replica-set or sharded, not '$LAYOUT'"; exit 2 ;;
esac

compose() { docker-compose -p "$PROJECT" -f "$COMPOSE_FILE" "$@"; }

# Every container of the layout: its services, each named bulwark-<service>.
containers() { compose config --services | sed 's/^/bulwark-/'; }

base() {
  case "$BASE_IMAGE" in
    bulwark-base:*) IMAGE=$BASE_IMAGE bash "$DEPLOY/build-base-image.sh" ;;
  esac
}

image() {
  [ -x "$BULWARK_BIN" ] || {
    echo "no binary at $BULWARK_BIN: run 'cargo build --release --bin bulwark' (or set BULWARK_BIN)"
    exit 1
  }
  local ctx
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/bulwark-image.XXXXXX")
  # The release profile keeps line tables (debug = 1): 130 MB of the binary's 135.
  if [ "${STRIP:-1}" = 1 ]; then
    objcopy --strip-debug "$BULWARK_BIN" "$ctx/bulwark"
  else
    cp "$BULWARK_BIN" "$ctx/bulwark"
  fi
  cp "$DEPLOY/healthcheck.sh" "$ctx/healthcheck.sh"
  # The classic builder: it needs no buildx plugin, which Debian's docker.io lacks. Its
  # output (and the client's deprecation notice) is shown only when the build fails.
  local out rc=0
  out=$(DOCKER_BUILDKIT=0 docker build -f "$DEPLOY/Dockerfile" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$BULWARK_IMAGE" "$ctx" 2>&1) || rc=$?
  rm -rf "$ctx"
  [ $rc = 0 ] || { echo "$out"; echo "docker build failed"; exit 1; }
  echo "built $BULWARK_IMAGE on $BASE_IMAGE from $BULWARK_BIN"
}

# A random cluster key in deploy/secrets/ (ignored by git), kept across runs; a key file
# named by BULWARK_KEY_FILE must exist already.
key() {
  local file=${BULWARK_KEY_FILE:-$DEPLOY/secrets/cluster-key}
  [ -s "$file" ] && return
  [ -z "${BULWARK_KEY_FILE:-}" ] || { echo "BULWARK_KEY_FILE=$file is missing or empty"; exit 1; }
  mkdir -p "$DEPLOY/secrets"
  chmod 700 "$DEPLOY/secrets"
  head -c 32 /dev/urandom | od -An -tx1 -v | tr -d ' \n' >"$file"
  # Read by uid 10001 in the containers through a bind mount; the directory keeps others out.
  chmod 644 "$file"
  echo "made a cluster key in $file"
}

# A CA and one member certificate it signed (subjectAltName bulwark-member, the name
# every node verifies; proto/src/cluster_tls.rs) in directory $1: $2-ca.pem, $2-ca.key,
# $2-member.pem, $2-member.key.
make_pki() {
  local dir=$1 name=$2
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
  openssl req -x509 "${ec[@]}" -days 3650 -subj "/CN=Bulwark $name CA" \
    -keyout "$dir/$name-ca.key" -out "$dir/$name-ca.pem" 2>/dev/null
  openssl req "${ec[@]}" -subj "/CN=bulwark-member" \
    -keyout "$dir/$name-member.key" -out "$dir/$name-member.csr" 2>/dev/null
  printf '%s\n' "subjectAltName=DNS:bulwark-member" "basicConstraints=CA:FALSE" \
    "keyUsage=digitalSignature" "extendedKeyUsage=serverAuth,clientAuth" >"$dir/$name-member.ext"
  openssl x509 -req -in "$dir/$name-member.csr" -CA "$dir/$name-ca.pem" \
    -CAkey "$dir/$name-ca.key" -CAcreateserial -days 3650 \
    -extfile "$dir/$name-member.ext" -out "$dir/$name-member.pem" 2>/dev/null
  rm -f "$dir/$name-member.csr" "$dir/$name-member.ext" "$dir/$name-ca.srl"
  # Read by uid 10001 in the containers through bind mounts. The CA's key stays on the
  # host: it only signs new member certificates.
  chmod 644 "$dir/$name-ca.pem" "$dir/$name-member.pem" "$dir/$name-member.key"
}

# The cluster's CA and member certificate in deploy/secrets/, kept across runs. Every
# router and member presents it and requires it of its peers.
certs() {
  local dir=$DEPLOY/secrets
  if [ -s "$dir/cluster-ca.pem" ] && [ -s "$dir/cluster-member.pem" ] && [ -s "$dir/cluster-member.key" ]; then
    return
  fi
  mkdir -p "$dir"
  chmod 700 "$dir"
  make_pki "$dir" cluster
  echo "made the cluster CA and member certificate in $dir"
}

# A stranger container on site A's network, from the same image, probes a member
# (`bulwark probe`): with no certificate, or with a certificate of its own CA (trusting
# the cluster's), it must be refused both a command and a Raft message; with the
# cluster's certificate and key (the control, so the check can fail) it is served.
# The sharded layout's target is a config server: the members that hold the catalog and
# the users.
stranger() {
  local member=bulwark-shard0-a1:27100 set=shard0 net=bulwark-site-a
  [ "${LAYOUT:-replica-set}" = sharded ] && member=bulwark-cfg-b:27100 set=config net=bulwark-site-b
  member=${STRANGER_TARGET:-$member} set=${STRANGER_SET:-$set} net=${STRANGER_NET:-$net}
  local tmp s=$DEPLOY/secrets failed=0
  tmp=$(mktemp -d)
  chmod 755 "$tmp"
  make_pki "$tmp" stranger
  probe() {
    docker run --rm --network "$net" -v "$tmp:/stranger:ro" \
      -v "$s/cluster-ca.pem:/cluster/ca.pem:ro" -v "$s/cluster-member.pem:/cluster/member.pem:ro" \
      -v "$s/cluster-member.key:/cluster/member.key:ro" -v "$s/cluster-key:/cluster/key:ro" \
      "$BULWARK_IMAGE" probe "$member" "$@"
  }
  local own=(--tls-cluster-cert /stranger/stranger-member.pem --tls-cluster-key /stranger/stranger-member.key --tls-cluster-ca /cluster/ca.pem)
  local cluster=(--tls-cluster-cert /cluster/member.pem --tls-cluster-key /cluster/member.key --tls-cluster-ca /cluster/ca.pem --cluster-key-file /cluster/key)
  for args in "" "--raft-set $set" "${own[*]}" "${own[*]} --raft-set $set" "${own[*]} --cluster-key-file /cluster/key"; do
    # shellcheck disable=SC2086
    if probe $args; then echo "FAILED: a stranger was served (probe $args)"; failed=1; fi
  done
  probe "${cluster[@]}" || { echo "FAILED: the cluster's own certificate was refused"; failed=1; }
  probe "${cluster[@]}" --raft-set "$set" || { echo "FAILED: the cluster's own Raft batch was refused"; failed=1; }
  rm -rf "$tmp"
  [ "$failed" = 0 ] && echo "stranger: refused without a cluster certificate, served with one"
  return "$failed"
}

# The log lines of container $1 since it last started (a restarted container keeps the
# lines of its earlier runs).
logs() { docker logs --since "$(docker inspect -f '{{.State.StartedAt}}' "$1")" "$1" 2>&1; }

# Healthy = every container's healthcheck passes and a router has the bootstrap admin user,
# which needs an elected primary and a majority-committed write.
wait_healthy() {
  local deadline=$((SECONDS + WAIT_SECS)) pending admin shards all
  mapfile -t all < <(containers)
  while :; do
    pending=()
    for c in "${all[@]}"; do
      [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c" 2>/dev/null)" = healthy ] ||
        pending+=("$c")
    done
    admin=no
    for r in bulwark-router-a bulwark-router-b bulwark-router-c; do
      logs "$r" | grep -q "bootstrap admin user ready" && admin=yes && break
    done
    # The sharded layout also needs its shards in the catalog (routers add them at start).
    shards=yes
    if [ "${LAYOUT:-replica-set}" = sharded ]; then
      shards=no
      for r in bulwark-router-a bulwark-router-b bulwark-router-c; do
        logs "$r" | grep -q "shards added at start are in the catalog" && shards=yes && break
      done
    fi
    if [ ${#pending[@]} = 0 ] && [ $admin = yes ] && [ $shards = yes ]; then
      echo "cluster healthy ($((SECONDS - start)) s after cluster.sh started)"
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "cluster not healthy after ${WAIT_SECS} s; unhealthy: ${pending[*]:-none}; admin user ready: $admin; shards added: $shards"
      compose ps
      for c in "${pending[@]}" bulwark-router-a; do
        echo "--- last log lines of $c"
        docker logs --tail 15 "$c" 2>&1 || true
      done
      return 1
    fi
    sleep 1
  done
}

down() {
  if compose down -v --remove-orphans; then
    # The other layout's volumes (one project, two files): `down -v` removes only this
    # file's.
    local vols
    vols=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
    [ -z "$vols" ] || docker volume rm $vols >/dev/null
    return
  fi
  # Docker 20.10 sometimes keeps a stale endpoint on a network: "has active endpoints" with
  # no container attached, until the daemon restarts. Compose stops at that error before it
  # removes the volumes, so remove them here; the next `up` reuses the network.
  local label=com.docker.compose.project=$PROJECT vols
  vols=$(docker volume ls -q --filter "label=$label")
  [ -z "$vols" ] || docker volume rm $vols >/dev/null
  [ -z "$(docker ps -aq --filter "label=$label")" ] || { echo "containers left behind"; return 1; }
  for n in $(docker network ls -q --filter "label=$label"); do
    docker network rm "$n" >/dev/null 2>&1 || true
  done
  echo "warning: containers and volumes removed; the Docker engine keeps network(s)" \
    "$(docker network ls --format '{{.Name}}' --filter "label=$label" | xargs)" \
    "(a stale endpoint; restarting the daemon clears it, and cluster-up reuses them meanwhile)"
}

start=$SECONDS
case "${1:-}" in
  up)
    base
    image
    key
    certs
    compose up -d --remove-orphans
    wait_healthy
    ;;
  wait) wait_healthy ;;
  image) base; image ;;
  key) key ;;
  certs) certs ;;
  stranger) stranger ;;
  down) down ;;
  compose) shift; compose "$@" ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
