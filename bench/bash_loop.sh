#!/usr/bin/env bash
# The bash suite's health loop (MiaAI-Lab's supervise.sh, docs/field-notes.md "The bash suite"), as small as
# it can be and with its defaults: a bench.compare peer (bench/compare_peers.py), not a product part.
#
# Every LOOP_S: is the container running? If not (and not held or broken), relaunch it the suite's way:
# wait the launch backoff (30 s doubling, cap 15 min), `docker rm -f NAME`, then the `docker run -d` line
# (no restart policy: only this loop restarts it). A launch whose container dies before /health answers is
# a failed launch; LAUNCH_FAILS of them in a row -> hold (no more launches). A running container it did
# not start itself gets ADOPT_GRACE_S before it is probed (it may be mid-load). Every PROBE_S: GET /health,
# then a 16-token chat completion that must return completion_tokens > 0; FAILS failures in a row ->
# emergency stop (`docker stop`), counted; BREAKER_N emergencies within BREAKER_WINDOW_S -> breaker open
# (no relaunch). A chat probe that fails while /health answers 200 is "congestion": the count is reset
# (the suite's bug: a stuck engine with a live /health is never escalated). Like the suite, curl has no
# timeout: a request that hangs holds the loop.
#
# Environment: NAME, URL, KEY, MODEL, RUN (the `docker run -d ...` command line, one string).
set -u

LOOP_S=${LOOP_S:-10}
PROBE_S=${PROBE_S:-60}
FAILS=${FAILS:-5}
BACKOFF_S=${BACKOFF_S:-30}
BACKOFF_MAX_S=${BACKOFF_MAX_S:-900}
LAUNCH_FAILS=${LAUNCH_FAILS:-3}
BREAKER_N=${BREAKER_N:-3}
BREAKER_WINDOW_S=${BREAKER_WINDOW_S:-7200}
ADOPT_GRACE_S=${ADOPT_GRACE_S:-900}
DEADLINE_S=${DEADLINE_S:-1800}

log() { echo "$(date -u +%FT%TZ) $*"; }

running() { [ "$(docker inspect -f '{{.State.Running}}' "$NAME" 2>/dev/null)" = "true" ]; }

health() { curl -sf -o /dev/null -H "Authorization: Bearer $KEY" "$URL/health"; }

chat() {
  local out
  out=$(curl -sf -H "Authorization: Bearer $KEY" -H 'content-type: application/json' \
    -d "{\"model\":\"$MODEL\",\"messages\":[{\"role\":\"user\",\"content\":\"ping\"}],\"max_tokens\":16}" \
    "$URL/v1/chat/completions") || return 1
  [[ "$out" =~ \"completion_tokens\":\ ?([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -gt 0 ]
}

backoff=$BACKOFF_S
launch_fails=0
fails=0
emergencies=()
held=0
launched_at=0  # this loop's launch, until it served (0: none pending)
next_probe=0
if running; then
  next_probe=$(($(date +%s) + ADOPT_GRACE_S))
  log "adopted a running container: grace ${ADOPT_GRACE_S}s before probing"
else  # the launcher's first start: no backoff
  docker rm -f "$NAME" >/dev/null 2>&1
  eval "$RUN" >/dev/null && launched_at=$(date +%s) && log "launched"
fi

while true; do
  now=$(date +%s)
  if ! running; then
    if [ "$launched_at" -gt 0 ]; then
      launch_fails=$((launch_fails + 1))
      launched_at=0
      log "launch failed ($launch_fails in a row)"
      if [ "$launch_fails" -ge "$LAUNCH_FAILS" ]; then
        held=1
        log "hold: $launch_fails failed launches, not launching again"
      fi
    fi
    window=()
    for t in "${emergencies[@]}"; do [ $((now - t)) -lt "$BREAKER_WINDOW_S" ] && window+=("$t"); done
    emergencies=("${window[@]}")
    if [ "$held" -eq 1 ]; then
      :
    elif [ "${#emergencies[@]}" -ge "$BREAKER_N" ]; then
      log "breaker open: ${#emergencies[@]} emergencies in ${BREAKER_WINDOW_S}s, not launching"
    else
      log "container down: launching after ${backoff}s"
      sleep "$backoff"
      backoff=$((backoff * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : backoff * 2))
      docker rm -f "$NAME" >/dev/null 2>&1
      if eval "$RUN" >/dev/null; then
        launched_at=$(date +%s)
        log "launched"
      else
        log "docker run failed"
      fi
      fails=0
      next_probe=0
    fi
  elif [ "$launched_at" -gt 0 ]; then
    if health; then
      log "serving after $((now - launched_at))s"
      launched_at=0
      launch_fails=0
      backoff=$BACKOFF_S
      next_probe=$((now + PROBE_S))
    elif [ $((now - launched_at)) -ge "$DEADLINE_S" ]; then
      log "launch deadline passed: stopping it"
      docker stop "$NAME" >/dev/null 2>&1
    fi
  elif [ "$now" -ge "$next_probe" ]; then
    next_probe=$((now + PROBE_S))
    if health && chat; then
      fails=0
    elif health; then
      log "probe failed with /health 200: congestion, count reset"
      fails=0
    else
      fails=$((fails + 1))
      log "probe failed ($fails/$FAILS)"
      if [ "$fails" -ge "$FAILS" ]; then
        log "emergency stop"
        emergencies+=("$now")
        docker stop "$NAME" >/dev/null 2>&1
        fails=0
      fi
    fi
  fi
  sleep "$LOOP_S"
done
