#!/bin/sh
# What the official image's entrypoint does on an empty data directory, reduced to what
# compose.yaml uses: a superuser with a password, one database, password logins over TCP.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}" >"$pwfile"
    # UTF8 as in the official image: under SQL_ASCII (initdb's default without a locale)
    # psycopg returns bytes, and SQLAlchemy cannot even read the server version.
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --encoding=UTF8 --locale=C.UTF-8 \
        --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\" OWNER \"$POSTGRES_USER\";" \
            | postgres --single -D "$PGDATA" postgres >/dev/null
    fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
