#!/usr/bin/env bash
# From zero: the whole check suite (`CI=true bash .ci/run`) on a new machine, timed, on this box.
#
# What it does:
#   1. an image of a fresh Debian 12 (bookworm): `mmdebstrap --variant=minbase --include=python3,ca-certificates`
#      with this host's apt sources, `docker import`ed as vsup-newmachine:bookworm (built once and kept in the
#      host's Docker engine; --rebuild makes it again). Nothing else is in it: no Docker, no venv, no images, no
#      pip cache, no ${VSUP_CACHE:-/var/cache/vllm-supervisor}, no pip configuration;
#   2. a container of it, vsup-newmachine-<id>, with what a privileged one has (every capability this box has,
#      no seccomp/AppArmor, all devices, /sys and its cgroups writable; --privileged itself fails on this box:
#      see the comment before `docker run`), its own network namespace, `--init`, /dev/shm as big as the host's, and a
#      fresh empty host directory /var/tmp/vsup-newmachine-<id>/docker bind-mounted at /var/lib/docker, so
#      that the engine scripts/setup starts inside gets overlay2 on ext4 (overlay on overlay fails). The
#      host's docker.sock, cache, pip cache, pip configuration and venvs are not shared; /dev/kmsg is (the
#      kernel is the host's: the container sees and writes the real kernel log). What any machine on this
#      box's network needs is added: the host's local CA certificates (its HTTPS egress proxy's; --no-host-cas:
#      not); and with --wheels DIR, DIR read-only at /opt/wheels as pip's find-links (the CPU torch wheel the
#      real-vLLM venv pins is not on PyPI: without it a truly new machine's setup fails there);
#   3. a fresh `git clone` of the repository at COMMIT (default: the tip of main), copied to /work/main inside;
#   4. `cd /work/main && CI=true bash .ci/run` inside (docker exec), its output teed to a log file on the host,
#      then the [setup] and [test] timing lines, the wall time of each part and the exit status of the inner run,
#      which is this script's exit status. --setup-only runs `bash scripts/setup` instead (no test runs: nothing
#      is written to /dev/kmsg), then checks that the inner engine runs a container of the project's base image.
#
# Needs: root on a Debian 12 host with a running Docker engine on cgroup v1 (checked; cgroup v2 is not
# supported: a host cgroup namespace there would let the inner engine write into the host's own cgroup tree),
# mmdebstrap (only to build the image), git, network access to the Debian mirror and to PyPI, several GB free
# in /var/tmp (the inner engine's data) and in the host's Docker root (the container's own files: the inner
# real-vLLM venv alone is 3.5 GB).
#
# Leaves behind: the image vsup-newmachine:bookworm in the host's engine (remove: `docker rmi
# vsup-newmachine:bookworm`) and the log file (--log; default /tmp/vsup-newmachine-<id>.log, plus
# <log>.dockerd.log, the inner engine's log). The container and /var/tmp/vsup-newmachine-<id> are removed on
# every exit (success, failure, Ctrl-C), unless --keep. Only that container, that directory and the image's
# own old versions (after --rebuild) are ever removed: other containers and images of this engine are not
# touched.
#
# Limits (docs/testing.md "From zero: a new machine in a container"): the kernel, its log (/dev/kmsg), the
# CPUs and the memory are the host's; a restart of the host's dockerd (the suite's exclusive tests do one
# when run on the host) stops the container and ends the run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="vsup-newmachine:bookworm"
IMAGE_LOCK="/tmp/vsup-newmachine-image.lock"
HOST_CA_DIR="/usr/local/share/ca-certificates"

usage() {
    cat <<EOF
usage: bash bench/from_zero.sh [options]
  --commit REV     commit of --repo to clone (default: main)
  --repo DIR       repository to clone (default: $ROOT)
  --setup-only     run \`bash scripts/setup\` inside instead of \`CI=true bash .ci/run\`, then a container of the
                   base image inside (the smoke check of the inner engine)
  --wheels DIR     mount DIR read-only at /opt/wheels inside and set PIP_FIND_LINKS=/opt/wheels for the run
                   (e.g. /opt/wheels: this box's CPU torch wheel, which PyPI does not have; without it the
                   real-vLLM build of scripts/setup cannot install torch==2.13.0+cpu)
  --no-host-cas    do not install the host's local CA certificates in the new machine ($HOST_CA_DIR/*.crt:
                   this box's HTTPS egress proxy needs them; without them pip cannot reach PyPI)
  --nice N         niceness of the inner run (default: this script's own, so \`nice -n 10 bash ...\` covers it;
                   a niceness does not cross \`docker exec\` by itself)
  --log FILE       log file on the host (default: /tmp/vsup-newmachine-<id>.log)
  --rebuild        build the image vsup-newmachine:bookworm again even if it exists
  --keep           leave the container and its /var/tmp directory for debugging (the removal command is printed)
  -h, --help       this text
EOF
}

COMMIT="main"
REPO="$ROOT"
SETUP_ONLY=0
WHEELS=""
HOST_CAS=1
NICE="$(nice)"
LOG=""
REBUILD=0
KEEP=0
while [ "$#" -gt 0 ]; do
    case "$1" in
        --commit) COMMIT="$2"; shift 2 ;;
        --repo) REPO="$2"; shift 2 ;;
        --setup-only) SETUP_ONLY=1; shift ;;
        --wheels) WHEELS="$2"; shift 2 ;;
        --no-host-cas) HOST_CAS=0; shift ;;
        --nice) NICE="$2"; shift 2 ;;
        --log) LOG="$2"; shift 2 ;;
        --rebuild) REBUILD=1; shift ;;
        --keep) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done

RUN_ID="$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')"
NAME="vsup-newmachine-$RUN_ID"
WORK="/var/tmp/vsup-newmachine-$RUN_ID"
LOG="${LOG:-/tmp/vsup-newmachine-$RUN_ID.log}"

say() { printf '[from-zero] %s\n' "$*" | tee -a "$LOG" >&2; }
die() { say "ERROR: $*"; exit 1; }
now_ns() { date +%s%N; }
secs() { printf '%.1f' "$(( ($2 - $1) / 1000000 ))e-3"; }

: >"$LOG"
[ "$(id -u)" -eq 0 ] || die "run as root (a container with every capability, a root-owned Docker data directory)"
docker info >/dev/null 2>&1 || die "the host's Docker engine does not answer (docker info)"
[ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ] || die "cgroup v2 host: not supported (see the header)"
[ -z "$WHEELS" ] || [ -d "$WHEELS" ] || die "--wheels $WHEELS: not a directory"
SHA="$(git -C "$REPO" rev-parse --verify "$COMMIT^{commit}")" || die "no commit $COMMIT in $REPO"

container_exists() { docker container inspect "$NAME" >/dev/null 2>&1; }

cleanup() {
    local rc=$?
    set +e
    if container_exists; then
        docker cp "$NAME:/var/log/vllm-supervisor-dockerd.log" "$LOG.dockerd.log" >/dev/null 2>&1 \
            && say "inner dockerd log: $LOG.dockerd.log"
    fi
    if [ "$KEEP" -eq 1 ]; then
        if container_exists || [ -d "$WORK" ]; then
            say "kept (--keep): container $NAME, directory $WORK; shell: docker exec -it $NAME bash"
            say "remove them with: docker rm -f $NAME; rm -rf $WORK"
        fi
        exit "$rc"
    fi
    if container_exists; then
        # the inner engine's containers first, then the engine (its pid file), so that nothing of it is killed
        # mid-write by the container's removal; then the container (its PID namespace takes the rest along)
        timeout 120 docker exec "$NAME" sh -c '
            command -v docker >/dev/null 2>&1 && [ -S /var/run/docker.sock ] || exit 0
            docker ps -aq | xargs -r docker rm -f >/dev/null 2>&1
            [ -f /var/run/docker.pid ] && kill "$(cat /var/run/docker.pid)" 2>/dev/null
            for _ in $(seq 30); do [ -f /var/run/docker.pid ] || exit 0; sleep 1; done' >/dev/null 2>&1
        docker rm -f "$NAME" >/dev/null || say "WARNING: could not remove container $NAME"
    fi
    if [ -d "$WORK" ]; then
        rm -rf "$WORK" || say "WARNING: could not remove $WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "run $RUN_ID: commit $SHA of $REPO, $([ "$SETUP_ONLY" -eq 1 ] && echo 'setup only' || echo 'CI=true bash .ci/run')," \
    "niceness $NICE, wheels ${WHEELS:-none}, log $LOG"
mkdir -p "$WORK/docker"
t_start=$(now_ns)

# 1. The image (one builder at a time; a second run reuses it).
build_image() {
    local sources="" tarball="$WORK/rootfs.tar" old new
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
        if [ -s "$f" ] && grep -Eq '^[[:space:]]*(URIs:|deb )' "$f"; then sources="$f"; break; fi
    done
    [ -n "$sources" ] || sources="http://deb.debian.org/debian"
    say "building $IMAGE: mmdebstrap minbase + python3, ca-certificates (apt sources: $sources)"
    mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates bookworm "$tarball" "$sources"
    old="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
    docker import -c 'CMD ["/bin/bash"]' "$tarball" "$IMAGE" >/dev/null
    rm -f "$tarball"
    new="$(docker image inspect -f '{{.Id}}' "$IMAGE")"
    if [ -n "$old" ] && [ "$old" != "$new" ]; then
        docker rmi "$old" >/dev/null 2>&1 || say "the previous $IMAGE ($old) is still in use: left"
    fi
}
t0=$(now_ns)
(
    flock 8
    if [ "$REBUILD" -eq 1 ] || ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
        build_image
    else
        say "image $IMAGE: cached ($(docker image inspect -f '{{.Created}}' "$IMAGE"))"
    fi
) 8>"$IMAGE_LOCK"
t_image=$(secs "$t0" "$(now_ns)")

# 2. The machine.
t0=$(now_ns)
shm="$(df -k --output=size /dev/shm | tail -n 1 | tr -d ' ')k"
# Not --privileged: this box's own capability bounding set lacks CAP_SYS_RESOURCE (CapBnd 0x1fffeffffff in
# /proc/self/status), and runc fails a privileged container with "unable to apply caps: operation not
# permitted" (Docker ignores --cap-drop beside --privileged). What a privileged container gets is given here
# piece by piece: every capability the box has, no seccomp/AppArmor profile, /proc unmasked, every device allowed
# (the inner engine makes its containers' device nodes) and the kernel log's node; /sys and the container's
# own cgroup directories are made writable below (mounted read-only for a container that is not privileged).
# The capabilities up to Docker 20.10's last (37) that this box's bounding set lacks are dropped.
CAP_NAMES=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
           NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
           SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
           AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ)
bounding=$(( 16#$(awk '/^CapBnd:/{print $2}' /proc/self/status) ))
cap_args=(--cap-add ALL)
for i in "${!CAP_NAMES[@]}"; do
    (( (bounding >> i) & 1 )) || cap_args+=(--cap-drop "${CAP_NAMES[$i]}")
done
run_args=(--detach --name "$NAME" --hostname newmachine --init --cgroupns=host "${cap_args[@]}"
          --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt systempaths=unconfined
          --device-cgroup-rule 'a *:* rwm' --device /dev/kmsg
          --shm-size "$shm" --label "vsup-newmachine=$RUN_ID"
          --mount "type=bind,source=$WORK/docker,target=/var/lib/docker")
[ -z "$WHEELS" ] || run_args+=(--mount "type=bind,source=$(cd "$WHEELS" && pwd),target=/opt/wheels,readonly")
docker run "${run_args[@]}" "$IMAGE" sleep infinity >/dev/null
# /sys and the cgroup hierarchies (host cgroup namespace on v1: each is a bind of this container's own cgroup
# directory, so the inner engine's cgroups nest under it) read-write, as a privileged container has them
docker exec "$NAME" sh -ec '
    mount -o remount,rw /sys
    for d in /sys/fs/cgroup/*; do [ -L "$d" ] || mount -o remount,rw,bind "$d"; done
    mkdir /sys/fs/cgroup/cpu/vsup-probe && rmdir /sys/fs/cgroup/cpu/vsup-probe' \
    || die "could not make /sys and the cgroup hierarchies writable in $NAME"
# The network's TLS: this box reaches PyPI (any HTTPS) through an egress proxy that presents its own CA's
# certificates; the host trusts that CA (/usr/local/share/ca-certificates), a bare Debian does not (pip:
# "CERTIFICATE_VERIFY_FAILED ... self-signed certificate in certificate chain"). Any machine on this network
# needs it: copied in and installed as an admin would (--no-host-cas: not).
if [ "$HOST_CAS" -eq 1 ] && compgen -G "$HOST_CA_DIR/*.crt" >/dev/null; then
    docker exec "$NAME" mkdir -p "$HOST_CA_DIR"
    for crt in "$HOST_CA_DIR"/*.crt; do docker cp -L "$crt" "$NAME:$HOST_CA_DIR/" >/dev/null; done
    docker exec "$NAME" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in $NAME"
    say "the host's local CA certificates installed: $(cd "$HOST_CA_DIR" && echo *.crt)"
fi
# a new machine indeed: nothing of Docker, no venv, no cache, no pip configuration
docker exec "$NAME" sh -c '
    for p in /usr/bin/docker /usr/bin/dockerd /var/run/docker.sock /var/cache/vllm-supervisor /root/.cache/pip \
             /etc/pip.conf /etc/xdg/pip /root/.config/pip /work; do
        [ ! -e "$p" ] || { echo "$p exists"; exit 1; }
    done
    [ -z "$(ls -A /var/lib/docker)" ] || { echo "/var/lib/docker not empty"; exit 1; }' \
    || die "the new machine is not new (see above)"
t_machine=$(secs "$t0" "$(now_ns)")

# 3. The checkout.
t0=$(now_ns)
git clone --quiet --no-hardlinks "$REPO" "$WORK/src/main"
git -C "$WORK/src/main" -c advice.detachedHead=false checkout --quiet --detach "$SHA"
docker exec "$NAME" mkdir -p /work
docker cp "$WORK/src/main" "$NAME:/work/main" >/dev/null
rm -rf "$WORK/src"
t_copy=$(secs "$t0" "$(now_ns)")

# 4. The run.
if [ "$SETUP_ONLY" -eq 1 ]; then inner=(bash scripts/setup); else inner=(bash .ci/run); fi
exec_env=(-e CI=true)
[ -z "$WHEELS" ] || exec_env+=(-e PIP_FIND_LINKS=/opt/wheels)
say "inner run: cd /work/main && CI=true${WHEELS:+ PIP_FIND_LINKS=/opt/wheels} nice -n $NICE ${inner[*]}"
t0=$(now_ns)
# In the background, then `wait`: bash runs a TERM/INT trap only once its foreground command has ended, which
# here could be an hour; `wait` returns at once. The exit status goes through a file (the pipeline's is tee's).
{ rc=0; docker exec "${exec_env[@]}" -w /work/main "$NAME" nice -n "$NICE" "${inner[@]}" || rc=$?
  echo "$rc" >"$WORK/inner.rc"; } 2>&1 | tee -a "$LOG" &
wait "$!" || true
rc="$(cat "$WORK/inner.rc" 2>/dev/null || echo 255)"
t_run=$(secs "$t0" "$(now_ns)")
say "inner run: exit $rc after ${t_run}s"

if [ "$SETUP_ONLY" -eq 1 ] && [ "$rc" -eq 0 ]; then
    # The engine scripts/setup started inside: its storage driver, and one container of the base image it built.
    if docker exec "$NAME" sh -ec '
        docker info --format "inner engine: {{.ServerVersion}}, storage {{.Driver}}, cgroup v{{.CgroupVersion}}"
        docker run --rm vllm-supervisor-base:local /usr/bin/python3.11 -c "print(\"hello from a container of the new machine\")"' \
        2>&1 | tee -a "$LOG"; then
        say "smoke: the inner engine runs containers"
    else
        say "smoke: FAILED (the inner engine did not run a container of the base image)"
        rc=1
    fi
fi

t_total=$(secs "$t_start" "$(now_ns)")
{
    echo "[from-zero] ===== summary (run $RUN_ID, commit ${SHA:0:12}, log $LOG)"
    # the timing lines of scripts/setup and scripts/test, their verdicts and errors
    grep -E '^\[setup\] [^ ]+ +[0-9.]+s$|^\[test\] [^ ]+ +[0-9.]+s|^\[(setup|test)\] (ERROR|FAILED|all checks|setup failed)' \
        "$LOG" || true
    printf '[from-zero] %-26s %8ss\n' "image" "$t_image" "machine (container start)" "$t_machine" \
        "checkout (clone + copy)" "$t_copy" "inner run (${inner[*]})" "$t_run" "total" "$t_total"
    echo "[from-zero] inner exit status: $rc"
} | tee -a "$LOG" >&2
exit "$rc"
