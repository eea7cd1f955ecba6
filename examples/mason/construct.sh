#!/bin/sh
# A Mason constructor for `steward worker run --handles MasonConstruct:construct --exec`: the
# operation JSON arrives on stdin (its params name the virtual resource, its type, the resources
# leased for it by type, and the config); the JSON object printed on stdout becomes the virtual
# resource's user data. Exit non-zero to fail: the leased resources go back dirty and the
# virtual resource waits for new ones.
set -eu
op=$(cat)
name=$STEWARD_TARGET_NAME
# What was leased for it, as the params list it (no jq needed for this demo).
leased=$(printf '%s' "$op" | tr -d '\n' | sed -n 's/.*"leasedResources":\({[^}]*}\).*/\1/p' | tr -d '"{}[] ')
if [ -n "${CONSTRUCT_LOG:-}" ]; then
  echo "$name $leased" >> "$CONSTRUCT_LOG"
fi
printf '{"endpoint": "https://%s.example.test", "builtFrom": "%s"}\n' "$name" "$leased"
