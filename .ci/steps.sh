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
