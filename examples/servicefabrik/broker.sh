#!/bin/sh
# broker.sh: Service Fabrik's managers (BoshManager, BindManager, BackupManager) as one program
# for `steward worker run --exec`. steward runs it once per assignment: the operation JSON on
# stdin, the verb and target in STEWARD_OPERATION_VERB and STEWARD_TARGET_KIND/_NAME. Exit 0
# with JSON on stdout is success (the JSON becomes the target's status.response); any other exit
# is a failure (stderr becomes status.error). An abort sends SIGTERM to the program and whatever
# it started, and SIGKILL after a grace.
#
# Nothing here talks to a real BOSH director: each flow prints what its manager would report.
# Needs only sh, sed, od and tr (no jq). Params are a flat JSON object of string values.
set -eu

op=$(cat)
verb=${STEWARD_OPERATION_VERB:?run me from steward worker run}
kind=${STEWARD_TARGET_KIND:?run me from steward worker run}
name=${STEWARD_TARGET_NAME:?run me from steward worker run}

# param KEY: the string value of KEY in the operation's params, or nothing.
param() {
    printf '%s' "$op" | sed -n "s/.*\"params\":{[^}]*\"$1\":\"\([^\"]*\)\".*/\1/p"
}

# secret: 16 random hex digits.
secret() {
    od -An -N8 -tx1 /dev/urandom | tr -d ' \n'
}

case "$kind:$verb" in
Director:create | Director:update)
    # BoshManager: deploy (or re-deploy with the new plan) and report the dashboard.
    plan=$(param plan_id)
    echo "{\"dashboard_url\":\"https://service-fabrik.example.test/manage/instances/$name\",\"plan_id\":\"${plan:-default}\"}"
    ;;
Director:delete)
    # BoshManager: delete the deployment; steward deletes the Director when this succeeds.
    echo '{}'
    ;;
DirectorBind:create)
    # BindManager: create a user on the instance and hand its credentials to the app.
    instance=$(param instance_guid)
    [ -n "$instance" ] || { echo "bind $name: params.instance_guid is missing" >&2; exit 1; }
    echo "{\"credentials\":{\"uri\":\"https://$instance.service-fabrik.example.test\",\"username\":\"$name\",\"password\":\"$(secret)\"}}"
    ;;
DirectorBind:delete)
    # BindManager: drop the user; steward deletes the DirectorBind when this succeeds.
    echo '{}'
    ;;
DefaultBackup:backup)
    # BackupManager: stream the instance's data to the blobstore for params.seconds (default 1).
    # On abort (SIGTERM) it removes the partial snapshot and exits non-zero.
    instance=$(param instance_guid)
    seconds=$(param seconds)
    snapshot="$name-$(secret)"
    trap 'echo "backup $name aborted: partial snapshot $snapshot removed" >&2; exit 143' TERM
    sleep "${seconds:-1}" &
    wait $!
    trap - TERM
    echo "{\"instance_guid\":\"$instance\",\"snapshot\":\"$snapshot\",\"seconds\":${seconds:-1}}"
    ;;
*)
    echo "broker.sh handles no $kind:$verb" >&2
    exit 1
    ;;
esac
