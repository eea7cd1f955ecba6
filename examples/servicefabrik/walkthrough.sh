#!/bin/sh
# walkthrough.sh: every Service Fabrik flow against a running steward cluster, with broker.sh as
# the managers: create, update, bind, backup, abort a backup, unbind, delete.
#
#   steward dev &                                   # or any cluster
#   examples/servicefabrik/walkthrough.sh
#
# Environment:
#   STEWARD            the steward binary (default: steward on PATH)
#   STEWARD_ENDPOINTS  the cluster (default: steward dev's 127.0.0.1:7001,7002,7003)
#   WAIT_SECONDS       how long one step may take to reach its state (default 20)
#
# It starts three workers (bosh-manager, bind-manager, backup-manager) that run broker.sh, runs
# each flow with `steward op submit` as Service Fabrik's ApiController would, waits for each
# operation's state by polling `steward op get ID -o json`, and exits non-zero at the first step
# that does not end as expected. The names are fresh guids, so it can run again on the same
# cluster. The workers are stopped (and deregistered) on exit; their logs are kept only on failure.
set -eu

STEWARD=${STEWARD:-steward}
STEWARD_ENDPOINTS=${STEWARD_ENDPOINTS:-127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003}
export STEWARD_ENDPOINTS
WAIT_SECONDS=${WAIT_SECONDS:-20}
here=$(cd "$(dirname "$0")" && pwd)
logs=$(mktemp -d "${TMPDIR:-/tmp}/walkthrough.XXXXXX")
workers=""

# guid: a random GUID (8-4-4-4-12 hex digits), as Service Fabrik names its instances. (Eight bare hex
# digits were not enough: "05420272" or "1e100000" read as numbers in YAML and come out quoted.)
guid() {
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' |
        sed -E 's/^(.{8})(.{4})(.{4})(.{4})(.{12})$/\1-\2-\3-\4-\5/'
}

fail() {
    echo "walkthrough.sh: FAILED: $*" >&2
    for log in "$logs"/*.log; do
        [ -f "$log" ] || continue
        echo "---- last lines of $log" >&2
        tail -n 20 "$log" >&2
    done
    exit 1
}

stop_workers() {
    status=$?
    for pid in $workers; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in $workers; do
        wait "$pid" 2>/dev/null || true
    done
    if [ "$status" -eq 0 ]; then
        rm -rf "$logs"
    else
        echo "walkthrough.sh: worker logs kept in $logs" >&2
    fi
}
trap stop_workers EXIT
trap 'exit 130' INT TERM

step() {
    printf '\n==> %s\n' "$*"
}

# show ARGS...: print `$ steward ARGS` and run it; its output is shown, a failure is fatal.
show() {
    echo "\$ steward $*"
    "$STEWARD" "$@" || fail "steward $* exited with $?"
}

# submit VERB KIND/NAME ARGS...: queue an operation, print it, and set $id.
submit() {
    echo "\$ steward op submit $*"
    out=$("$STEWARD" op submit "$@") || fail "steward op submit $* exited with $?"
    echo "$out"
    id=$(echo "$out" | sed -n '2s/^\(op-[0-9]*\) .*/\1/p')
    [ -n "$id" ] || fail "no operation id in: $out"
}

# op_state ID: the operation's state (the top-level "state" of `op get -o json`).
op_state() {
    "$STEWARD" op get "$1" -o json | sed -n 's/^  "state": "\([a-z_]*\)",*$/\1/p'
}

# await ID STATE: poll until operation ID is in STATE; fail if it ends in another state or
# WAIT_SECONDS pass.
await() {
    deadline=$(($(date +%s) + WAIT_SECONDS))
    while :; do
        state=$(op_state "$1") || fail "steward op get $1 failed"
        [ "$state" = "$2" ] && { echo "# $1 is $state"; return 0; }
        case "$state" in
        succeeded | failed | aborted)
            "$STEWARD" op get "$1" >&2 || true
            fail "$1 ended $state, expected $2"
            ;;
        esac
        [ "$(date +%s)" -lt "$deadline" ] || fail "$1 still $state after ${WAIT_SECONDS}s, expected $2"
        sleep 0.2
    done
}

# expect KIND NAME TEXT...: the object's YAML contains each TEXT (a line, or part of one).
expect() {
    kind=$1 name=$2
    shift 2
    yaml=$("$STEWARD" get "$kind" "$name" -o yaml) || fail "steward get $kind $name failed"
    for text in "$@"; do
        case "$yaml" in
        *"$text"*) ;;
        *) fail "$kind/$name does not show '$text':
$yaml" ;;
        esac
    done
}

# expect_gone KIND NAME: the object does not exist any more.
expect_gone() {
    echo "\$ steward get $1 $2"
    if err=$("$STEWARD" get "$1" "$2" 2>&1); then
        fail "$1/$2 still exists: $err"
    fi
    echo "$err"
    case "$err" in
    *NotFound*) ;;
    *) fail "steward get $1 $2: expected NotFound, got: $err" ;;
    esac
}

# worker ID HANDLES: start `steward worker run` with broker.sh in the background.
worker() {
    echo "\$ steward worker run --id $1 --handles $2 --exec $here/broker.sh &"
    "$STEWARD" worker run --id "$1" --handles "$2" --exec "$here/broker.sh" >"$logs/$1.log" 2>&1 &
    workers="$workers $!"
}

instance=$(guid)
bind=$(guid)
backup=$(guid)
aborted=$(guid)

step "Service Fabrik's managers register as workers; broker.sh does the work"
worker bosh-manager Director:create,Director:update,Director:delete
worker bind-manager DirectorBind:create,DirectorBind:delete
worker backup-manager DefaultBackup:backup
deadline=$(($(date +%s) + WAIT_SECONDS))
until [ "$("$STEWARD" worker list 2>/dev/null | grep -cE '^(bosh|bind|backup)-manager +yes ')" -eq 3 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the three workers did not register within ${WAIT_SECONDS}s"
    for pid in $workers; do
        kill -0 "$pid" 2>/dev/null || fail "a worker exited (pid $pid)"
    done
    sleep 0.2
done
show worker list

step "create: the ApiController creates Director/$instance in_queue; BoshManager provisions it"
submit create "Director/$instance" --idempotency-key "create-$instance" \
    --params '{"plan_id":"small"}' \
    --create "{\"apiVersion\":\"deployment.servicefabrik.io/v1alpha1\",\"kind\":\"Director\",\"metadata\":{\"name\":\"$instance\",\"labels\":{\"instance_guid\":\"$instance\"}},\"spec\":{\"options\":\"{\\\"plan_id\\\":\\\"small\\\"}\"}}"
await "$id" succeeded
show get Director "$instance" -o yaml
expect Director "$instance" "state: succeeded" "lastOperation: create" \
    "dashboard_url: https://service-fabrik.example.test/manage/instances/$instance"

step "update: a new plan; BoshManager re-deploys"
submit update "Director/$instance" --params '{"plan_id":"large"}'
await "$id" succeeded
show op get "$id"
expect Director "$instance" "state: succeeded" "lastOperation: update" "plan_id: large"

step "bind: the ApiController creates DirectorBind/$bind; BindManager returns credentials"
submit create "DirectorBind/$bind" --params "{\"instance_guid\":\"$instance\"}" \
    --create "{\"apiVersion\":\"bind.servicefabrik.io/v1alpha1\",\"kind\":\"DirectorBind\",\"metadata\":{\"name\":\"$bind\",\"labels\":{\"instance_guid\":\"$instance\"}},\"spec\":{\"instance\":\"$instance\",\"options\":\"{}\"}}"
await "$id" succeeded
show get DirectorBind "$bind" -o yaml
expect DirectorBind "$bind" "state: succeeded" "username: $bind" "password: "

step "backup: DefaultBackup/$backup in_queue -> in_progress -> succeeded (the Director's READ lock)"
submit backup "DefaultBackup/$backup" --lock "Director/$instance" --params "{\"instance_guid\":\"$instance\"}" \
    --create "{\"apiVersion\":\"backup.servicefabrik.io/v1alpha1\",\"kind\":\"DefaultBackup\",\"metadata\":{\"name\":\"$backup\",\"labels\":{\"instance_guid\":\"$instance\"}},\"spec\":{\"options\":\"{}\"}}"
await "$id" succeeded
show get DefaultBackup "$backup" -o yaml
expect DefaultBackup "$backup" "state: succeeded" "lastOperation: backup" "snapshot: $backup-"

step "abort: a long backup, aborted while it runs: aborting until BackupManager stops, then aborted"
submit backup "DefaultBackup/$aborted" --lock "Director/$instance" --params "{\"instance_guid\":\"$instance\",\"seconds\":\"600\"}" \
    --create "{\"apiVersion\":\"backup.servicefabrik.io/v1alpha1\",\"kind\":\"DefaultBackup\",\"metadata\":{\"name\":\"$aborted\",\"labels\":{\"instance_guid\":\"$instance\"}},\"spec\":{\"options\":\"{}\"}}"
await "$id" in_progress
backup_id=$id
# The backup holds the Director's READ lock (the DeploymentLock): an update of the Director
# waits in the queue until the backup ends.
show lock get "Director/default/$instance"
submit update "Director/$instance" --params '{"plan_id":"xlarge"}'
update_id=$id
[ "$(op_state "$update_id")" = queued ] || fail "$update_id ran while the backup held the Director's lock"
show op abort "$backup_id"
await "$backup_id" aborted
await "$update_id" succeeded
id=$backup_id
show op get "$id"
expect DefaultBackup "$aborted" "state: aborted" "lastOperation: backup"
show get DefaultBackup -l "instance_guid=$instance,state=succeeded"

step "unbind: BindManager drops the credentials; steward deletes DirectorBind/$bind"
submit delete "DirectorBind/$bind"
await "$id" succeeded
expect_gone DirectorBind "$bind"

step "delete: BoshManager deletes the deployment; steward deletes Director/$instance"
submit delete "Director/$instance"
await "$id" succeeded
expect_gone Director "$instance"
show op list --target "Director/$instance"

step "every flow ended as expected"
