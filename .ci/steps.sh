# Sourced by .ci/run and .ci/backends: named steps, timed, and one closing summary line of them all.
#   step NAME COMMAND...  runs COMMAND; under `set -e` a failure ends the script there (as before)
#   ci_part NAME RC SECS  records a part whose status the caller keeps (.ci/backends goes on after one);
#                         RC "skip" records a part that could not run here
#   ci_summary LABEL      prints "LABEL: passed|FAILED (exit N) in M min: NAME pass (M min), ..."; as
#                         `trap 'ci_summary LABEL' EXIT` it is the last line even when a step fails,
#                         and it keeps the script's exit status
CI_PARTS=()
CI_CURRENT=""
CI_CURRENT_START=0
CI_START=$SECONDS

ci_minutes() {  # ci_minutes SECONDS: "M.T min"
    printf '%d.%d min' $(($1 / 60)) $(($1 % 60 * 10 / 60))
}

ci_part() {
    if [ "$2" = skip ]; then
        CI_PARTS+=("$1 skipped")
    elif [ "$2" = 0 ]; then
        CI_PARTS+=("$1 pass ($(ci_minutes "$3"))")
    else
        CI_PARTS+=("$1 FAIL ($(ci_minutes "$3"))")
    fi
}

step() {
    CI_CURRENT="$1"; shift
    CI_CURRENT_START=$SECONDS
    "$@"
    ci_part "$CI_CURRENT" 0 $((SECONDS - CI_CURRENT_START))
    CI_CURRENT=""
}

ci_summary() {
    local rc=$? verdict=passed joined="" part
    if [ -n "$CI_CURRENT" ]; then  # the step set -e stopped in
        ci_part "$CI_CURRENT" 1 $((SECONDS - CI_CURRENT_START))
        CI_CURRENT=""
    fi
    [ "$rc" = 0 ] || verdict="FAILED (exit $rc)"
    for part in "${CI_PARTS[@]}"; do
        joined="${joined:+$joined, }$part"
    done
    echo "$1: $verdict in $(ci_minutes $((SECONDS - CI_START))): ${joined:-no step ran}"
    return "$rc"
}

# together NAME FUNCTION [NAME FUNCTION ...]  runs the steps at once (steps that keep one core busy
#                       each: on a 2-core host they end in the time of the longer one); each one's
#                       output is printed whole, in the order given, when all have ended; each is
#                       recorded with its own minutes; a failure ends the script (set -e) with the
#                       first failing step's status, after every step has ended and printed
kill_tree() {  # kill_tree PID: SIGTERM to PID's descendants, then to PID
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do
        kill_tree "$child"
    done
    kill -TERM "$1" 2>/dev/null || true
}

together() {
    local dir names=() pids=() i rc first=0
    dir="$(mktemp -d)"
    while [ $# -ge 2 ]; do
        i=${#names[@]}
        names+=("$1")
        ( start=$SECONDS; rc=0; ( "$2" ) > "$dir/$i.log" 2>&1 || rc=$?
          echo "$rc $((SECONDS - start))" > "$dir/$i.end"; exit "$rc" ) &
        pids+=($!)
        shift 2
    done
    CI_CURRENT="${names[*]}"
    CI_CURRENT_START=$SECONDS
    # background jobs of a script ignore Ctrl-C: an interrupted run stops them and what they started
    trap 'trap "" INT TERM; for i in "${pids[@]}"; do kill_tree "$i"; done; exit 130' INT TERM
    echo "ci: ${names[*]} run at once; each one's output follows when all have ended"
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || true
    done
    trap - INT TERM
    CI_CURRENT=""
    for i in "${!names[@]}"; do
        echo "ci: --- ${names[$i]} ---"
        cat "$dir/$i.log"
        read -r rc secs < "$dir/$i.end" 2>/dev/null || { rc=1; secs=0; }  # killed before it could say
        ci_part "${names[$i]}" "$rc" "$secs"
        [ "$rc" = 0 ] || [ "$first" != 0 ] || first=$rc
    done
    rm -rf "$dir"
    return "$first"
}
