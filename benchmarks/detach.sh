#!/usr/bin/env bash
# One GPU run longer than the device tool's 10-minute call, without a restart per call.
#
# The device tool kills what a call leaves running when the call returns, except a process that
# started its own session (setsid); that one runs on until the machine goes back. So:
#
#   bash benchmarks/detach.sh start DIR -- CMD ...   # copy the repo to DIR/repo, run CMD there, detached
#   bash benchmarks/detach.sh wait DIR SECONDS        # wait up to SECONDS for it; exit 0 once done (rc in
#                                                     # DIR/rc), 3 while it still runs; prints the log's tail
#
# A 7B job spends 250-390 s starting (Ray, FSDP init, vLLM spawn): one detached job of 25 minutes logs
# about twice the measured steps of two 10-minute commands. CMD runs from DIR/repo (a copy without
# .git and the staged .whl, since the next call re-copies the working tree), its output in DIR/log.
set -euo pipefail
cmd=${1:?start|wait}; dir=${2:?DIR}
case "$cmd" in
  start)
    shift 2; [ "${1:-}" = "--" ] && shift
    [ "$#" -gt 0 ] || { echo "detach.sh start DIR -- CMD ..." >&2; exit 2; }
    [ -e "$dir/pid" ] && { echo "$dir already holds a run (pid $(cat "$dir/pid"))" >&2; exit 2; }
    mkdir -p "$dir/repo"
    tar --exclude=./.git --exclude=./.whl -cf - . | tar -xf - -C "$dir/repo"
    printf '%q ' "$@" > "$dir/cmd"
    setsid bash -c 'cd "$1/repo" && bash "$1/cmd" > "$1/log" 2>&1 < /dev/null; echo $? > "$1/rc"' _ "$dir" \
      > /dev/null 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    echo "started pid $(cat "$dir/pid"): $(cat "$dir/cmd")"
    ;;
  wait)
    secs=${3:?SECONDS}; end=$((SECONDS + secs))
    while [ ! -e "$dir/rc" ] && [ "$SECONDS" -lt "$end" ]; do sleep "${DETACH_POLL_S:-5}"; done
    tail -n 15 "$dir/log" 2>/dev/null || true
    if [ -e "$dir/rc" ]; then echo "done rc=$(cat "$dir/rc")"; exit 0; fi
    echo "still running after ${secs} s"; exit 3
    ;;
  *) echo "detach.sh start|wait DIR ..." >&2; exit 2 ;;
esac
