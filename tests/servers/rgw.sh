#!/usr/bin/env bash
# Starts, stops and reports on a single-node Ceph RADOS Gateway bound to
# 127.0.0.1, everything (config, mon store, memstore OSD data, logs, admin
# sockets, pid files) under one directory. It is the S3 server of the
# integration tests, the demo and the benchmark (doc/design.md section 4). The
# settings and why each one is there: doc/ceph-rgw.md.
#
# Usage:
#   tests/servers/rgw.sh start DIR
#           start (or restart a cleanly stopped) cluster; writes DIR/env and
#           prints the endpoint
#   tests/servers/rgw.sh stop DIR
#           stop exactly the daemons recorded in DIR/*.pid
#   tests/servers/rgw.sh status DIR
#           exit 0 if all three daemons run, 3 if not
#
# DIR/env is shell-sourceable: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, AWS_REGION (plus RGW_MON_PORT, RGW_HTTP_PORT).
#
# Environment (optional): RGW_ACCESS_KEY, RGW_SECRET_KEY (default the fixed
# test pair below), RGW_STS=1 (STS on: AssumeRole and session tokens),
# RGW_MEMSTORE_BYTES (OSD capacity in RAM, default 4 GiB;
# only what is stored is allocated), RGW_START_TIMEOUT (seconds, default 60).
#
# A fresh start takes about 1 s on this project's 2-core machine; a restart of
# a stopped DIR about 5 s (the gateway waits for the OSD's placement groups).
#
# Daemons run in foreground mode (-f) in their own session so they outlive
# this script; their PIDs go to DIR/{mon,osd,rgw}.pid and `stop` signals only
# those PIDs, and only while /proc says they still run with DIR/ceph.conf.
set -euo pipefail

ACCESS_KEY=${RGW_ACCESS_KEY:-hintfsaccesskey}
SECRET_KEY=${RGW_SECRET_KEY:-hintfssecretkey123}
MEMSTORE_BYTES=${RGW_MEMSTORE_BYTES:-4294967296}
START_TIMEOUT=${RGW_START_TIMEOUT:-60}
# Stop order: the gateway first (it is a client of the other two), the
# monitor last (the OSD reports its shutdown to it).
DAEMONS=(rgw osd mon)
HERE=$(cd "$(dirname "$0")" && pwd)

die() {
	echo "rgw.sh: error: $*" >&2
	exit 1
}

usage() {
	echo "usage: $0 start|stop|status DIR" >&2
	exit 2
}

# pid_of NAME -> prints the recorded PID of daemon NAME if that process is
# alive (not a zombie) and was started with this DIR's ceph.conf; returns 1
# otherwise. Guards against signalling a recycled PID.
pid_of() {
	local f="$DIR/$1.pid" pid state
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[ -r "/proc/$pid/cmdline" ] || return 1
	state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
	[ "$state" != Z ] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR/ceph.conf" || return 1
	echo "$pid"
}

# wait_gone PID SECONDS -> 0 once PID has exited (or is a zombie).
wait_gone() {
	local pid=$1 deadline=$((SECONDS + $2)) state
	while [ $SECONDS -lt $deadline ]; do
		state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 0
		[ "$state" = Z ] && return 0
		sleep 0.1
	done
	return 1
}

do_stop() {
	local d pid
	for d in "${DAEMONS[@]}"; do
		if pid=$(pid_of "$d"); then
			kill -TERM "$pid" 2>/dev/null || true
			# The OSD saves its memstore on a clean stop: give it time.
			if ! wait_gone "$pid" 20; then
				echo "rgw.sh: $d (pid $pid) ignored SIGTERM, killing" >&2
				kill -KILL "$pid" 2>/dev/null || true
				wait_gone "$pid" 5 || echo "rgw.sh: $d (pid $pid) still there" >&2
			fi
		fi
		rm -f "$DIR/$d.pid"
	done
}

do_status() {
	local d pid rc=0
	for d in "${DAEMONS[@]}"; do
		if pid=$(pid_of "$d"); then
			echo "$d: running (pid $pid)"
		else
			echo "$d: stopped"
			rc=3
		fi
	done
	[ -f "$DIR/env" ] && grep '^AWS_ENDPOINT_URL=' "$DIR/env"
	return $rc
}

# Two distinct free TCP ports on 127.0.0.1, chosen by the kernel. Both are
# held open together so they differ; a small race with other programs
# remains until the daemons bind them.
free_ports() {
	local py=/usr/bin/python3
	[ -x "$py" ] || py=python3
	"$py" - <<'EOF'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# Whether something accepts connections on 127.0.0.1:PORT (bash's /dev/tcp:
# no curl or ss needed).
port_busy() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# With RGW_STS=1: STS (AssumeRole) for the credential tests, temporary
# credentials and SigV4 with x-amz-security-token for data reads. Off by
# default: with it on, Pacific answers a wrong secret or an unknown key with
# AccessDenied instead of SignatureDoesNotMatch / InvalidAccessKeyId, and
# the tests of those messages need the real codes. The key (16 bytes, AES)
# encrypts the session tokens; a test cluster's is fixed.
sts_conf() {
	[ "${RGW_STS:-0}" = 1 ] || return 0
	printf '%s\n' "rgw s3 auth use sts = true" "rgw sts key = hintfsstskey0123"
}

write_conf() {
	cat >"$DIR/ceph.conf" <<EOF
# Written by tests/servers/rgw.sh: a single-node cluster on 127.0.0.1.
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MON_PORT
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
ms bind msgr2 = true
ms bind ipv6 = false
# cephx off everywhere (see [client.rgw] too).
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
# One OSD: pools of size one, no crush failure domain, few PGs.
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
# Everything under DIR.
run dir = $DIR/run
admin socket = $DIR/run/\$cluster-\$name.asok
log file = $DIR/log/\$cluster-\$name.log
crash dir = $DIR/crash
keyring = $DIR/keyring
mon data = $DIR/mon/\$cluster-\$id
osd data = $DIR/osd/\$cluster-\$id
rgw data = $DIR/rgw
pid file =
# A disk at 95% must not stop the test cluster.
mon data avail warn = 1
mon data avail crit = 0
# Small memory footprint.
mon memory target = 268435456
osd memory target = 943718400
rocksdb cache size = 33554432
osd objectstore = memstore
memstore device bytes = $MEMSTORE_BYTES
# Clean SIGTERM saves memstore to osd data, so DIR restarts with its objects.
osd fast shutdown = false

[mon]
# Bootstrap makes ~20 sequential map updates: 1 s each by default.
paxos propose interval = 0.05

[client.rgw]
# Without these two radosgw waits forever for auth and never opens its port.
auth client required = none
ms mon client mode = crc
# Without tcp_nodelay every request stalls ~40 ms.
rgw frontends = beast endpoint=127.0.0.1:$HTTP_PORT tcp_nodelay=1
rgw dns name = 127.0.0.1
$(sts_conf)
EOF
}

# spawn NAME CMD... : run CMD in the background in its own session, record
# its PID in DIR/NAME.pid. Without job control a background job is not a
# process-group leader, so setsid execs in place and $! is the daemon.
spawn() {
	local name=$1
	shift
	setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
	echo $! >"$DIR/$name.pid"
}

# ceph_cli CMD... : a ceph tool against this cluster, bounded in time.
ceph_cli() {
	timeout "$START_TIMEOUT" "$1" -c "$DIR/ceph.conf" "${@:2}"
}

# Whether the gateway answers HTTP (any status) on its port.
http_up() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
		printf "GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 &&
		head -c 5 <&3' _ "$HTTP_PORT" 2>/dev/null | grep -q '^HTTP/'
}

# EXIT trap while starting: any failure (set -e, die, timeout) stops what
# was started, so a failed start leaves no daemon behind.
start_failed() {
	local rc=$?
	trap - EXIT
	[ $rc -ne 0 ] || return 0
	echo "rgw.sh: error: start failed (exit $rc); logs in $DIR/log; stopping what was started" >&2
	tail -n 5 "$DIR"/log/*.out >&2 2>/dev/null || true
	do_stop
	exit $rc
}

do_start() {
	local t0 fresh=1 d running=0 deadline
	t0=$(date +%s.%N)
	for d in "${DAEMONS[@]}"; do
		pid_of "$d" >/dev/null && running=$((running + 1))
	done
	if [ $running -eq ${#DAEMONS[@]} ] && [ -f "$DIR/env" ]; then
		echo "rgw.sh: already running in $DIR" >&2
		sed -n 's/^AWS_ENDPOINT_URL=//p' "$DIR/env"
		return 0
	fi
	if [ $running -gt 0 ]; then
		die "$DIR is partly running; run '$0 stop $DIR' first"
	fi

	if ! command -v radosgw >/dev/null || ! command -v ceph-mon >/dev/null ||
		! command -v ceph-osd >/dev/null || ! command -v radosgw-admin >/dev/null; then
		bash "$HERE/../install-deps.sh" --no-torch
	fi

	if [ -f "$DIR/env" ] && [ -f "$DIR/ports" ]; then
		# A stopped cluster that once started fully (env is written
		# last): the monmap holds the mon port, so both ports are reused.
		fresh=0
		read -r MON_PORT HTTP_PORT FSID <"$DIR/ports"
		for p in "$MON_PORT" "$HTTP_PORT"; do
			port_busy "$p" && die "port $p recorded in $DIR/ports is in use; use a fresh DIR"
		done
	else
		[ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty and holds no stopped cluster; use an empty DIR"
		read -r MON_PORT HTTP_PORT < <(free_ports)
		FSID=$(cat /proc/sys/kernel/random/uuid)
		echo "$MON_PORT $HTTP_PORT $FSID" >"$DIR/ports"
	fi
	mkdir -p "$DIR"/{run,log,crash,mon,osd/ceph-0,rgw}
	: >"$DIR/keyring"
	write_conf
	trap start_failed EXIT

	if [ $fresh -eq 1 ]; then
		monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" \
			"$DIR/monmap" >/dev/null
		ceph_cli ceph-mon -i a --mkfs --monmap "$DIR/monmap" >/dev/null
	fi
	spawn mon ceph-mon -c "$DIR/ceph.conf" -i a -f
	if [ $fresh -eq 1 ]; then
		local osd_uuid osd_id
		osd_uuid=$(cat /proc/sys/kernel/random/uuid)
		osd_id=$(ceph_cli ceph osd new "$osd_uuid" 2>/dev/null)
		[ "$osd_id" = 0 ] || die "ceph osd new gave '$osd_id', expected 0"
		ceph_cli ceph-osd -i 0 --mkfs --osd-uuid "$osd_uuid" >/dev/null 2>&1
	fi
	spawn osd ceph-osd -c "$DIR/ceph.conf" -i 0 -f
	if [ $fresh -eq 1 ]; then
		# Before the gateway starts: run side by side, both create the
		# default zone and one of them backs off for ~5 s.
		ceph_cli radosgw-admin -n client.rgw --admin-socket= \
			--log-file="$DIR/log/radosgw-admin.log" user create --uid test \
			--display-name test --access-key "$ACCESS_KEY" \
			--secret-key "$SECRET_KEY" >/dev/null
	fi
	spawn rgw radosgw -c "$DIR/ceph.conf" -n client.rgw -f

	deadline=$((SECONDS + START_TIMEOUT))
	until http_up; do
		for d in "${DAEMONS[@]}"; do
			pid_of "$d" >/dev/null || die "$d exited during start (see $DIR/log/$d.out)"
		done
		[ $SECONDS -lt $deadline ] || die "no answer on 127.0.0.1:$HTTP_PORT after ${START_TIMEOUT}s"
		sleep 0.1
	done
	trap - EXIT

	local tmp="$DIR/env.tmp"
	{
		echo "AWS_ENDPOINT_URL=http://127.0.0.1:$HTTP_PORT"
		echo "AWS_ACCESS_KEY_ID=$ACCESS_KEY"
		echo "AWS_SECRET_ACCESS_KEY=$SECRET_KEY"
		echo "AWS_REGION=us-east-1"
		echo "RGW_MON_PORT=$MON_PORT"
		echo "RGW_HTTP_PORT=$HTTP_PORT"
	} >"$tmp"
	chmod 600 "$tmp"
	mv "$tmp" "$DIR/env"
	awk -v a="$t0" -v b="$(date +%s.%N)" -v d="$DIR" \
		'BEGIN { printf "rgw.sh: started in %.1fs: %s\n", b - a, d }' >&2
	echo "http://127.0.0.1:$HTTP_PORT"
}

[ $# -eq 2 ] || usage
CMD=$1
[ "$CMD" != start ] || mkdir -p "$2"
if [ ! -d "$2" ]; then
	[ "$CMD" = stop ] && exit 0
	die "$2 is not a directory"
fi
DIR=$(cd "$2" && pwd -P)

case "$CMD" in
start) do_start ;;
stop) do_stop ;;
status) do_status ;;
*) usage ;;
esac
