# Sourced by the studies' finish.sh scripts. archive_finished RUNS_DIR OUT archives the finished runs of
# RUNS_DIR into OUT and goes on where there is nothing to archive yet: RUNS_DIR does not exist, or its only
# runs are still going (fedaug archive exits 2, and a line says so). Any other failure stops the script.
archive_finished() {
    [ -d "$1" ] || return 0
    local status=0
    fedaug archive "$1" --out "$2" || status=$?
    if [ "$status" -eq 2 ]; then
        echo "nothing finished in $1"
    elif [ "$status" -ne 0 ]; then
        return "$status"
    fi
}
