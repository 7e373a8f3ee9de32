#!/usr/bin/env bash
# Creates (if absent) and migrates the Temporal server's two Postgres
# databases with the server's own schema tool, from the schemas embedded in
# it: the store (DBNAME) and SQL visibility (VISIBILITY_DBNAME). Idempotent:
# run it before every server start and after every server upgrade (it applies
# only the versions the databases lack). Used by docker/compose.yaml
# (temporal-schema), by the tests (internal/testenv) and docs/production.md.
#
# Environment, as docker/temporal/config.yaml reads it:
#   POSTGRES_SEEDS [127.0.0.1] DB_PORT [5432] POSTGRES_USER [postgres] POSTGRES_PWD []
#   DBNAME [temporal] VISIBILITY_DBNAME [temporal_visibility]
#   TEMPORAL_SQL_TOOL [temporal-sql-tool on PATH]
set -euo pipefail
tool=${TEMPORAL_SQL_TOOL:-temporal-sql-tool}
args=(--plugin postgres12 --ep "${POSTGRES_SEEDS:-127.0.0.1}" --port "${DB_PORT:-5432}" --user "${POSTGRES_USER:-postgres}")
if [ -n "${POSTGRES_PWD:-}" ]; then args+=(--password "$POSTGRES_PWD"); fi
for pair in "${DBNAME:-temporal}:temporal" "${VISIBILITY_DBNAME:-temporal_visibility}:visibility"; do
  db=${pair%%:*} schema=postgresql/v12/${pair##*:}
  # create-database fails when the database exists; setup-schema then tells.
  "$tool" "${args[@]}" --db "$db" create-database >/dev/null 2>&1 || true
  "$tool" "${args[@]}" --db "$db" setup-schema -v 0.0
  "$tool" "${args[@]}" --db "$db" update-schema --schema-name "$schema"
done
echo "temporal schema: ${DBNAME:-temporal} and ${VISIBILITY_DBNAME:-temporal_visibility} are up to date"
