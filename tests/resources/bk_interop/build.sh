#!/usr/bin/env bash
# Build BkInterop.java against Apache BookKeeper (org.apache.bookkeeper:bookkeeper-server) from Maven
# Central, in a cache outside the repository; print the classpath that runs both BkInterop and
# BookKeeper's bookie (org.apache.bookkeeper.server.Main), then the log4j2 configuration file.
#   tests/resources/bk_interop/build.sh [BOOKKEEPER_VERSION]
# Exit status: 0 built (or already built), 3 Maven Central could not be reached or the artifacts
# could not be fetched, 4 java, javac or mvn missing, other: the build failed.
set -euo pipefail
version=${1:-4.17.3}
here=$(cd "$(dirname "$0")" && pwd)
cache=${MAGNETAR_BK_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/magnetar/bk-interop}/$version
for tool in java javac mvn; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 4; }
done
mkdir -p "$cache"
if [ ! -s "$cache/classpath" ]; then
  cat >"$cache/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.magnetar</groupId><artifactId>bk-interop</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>org.apache.bookkeeper</groupId><artifactId>bookkeeper-server</artifactId><version>$version</version></dependency>
  </dependencies>
</project>
POM
  if ! mvn -q -B -f "$cache/pom.xml" dependency:build-classpath -Dmdep.outputFile="$cache/classpath.tmp" \
      >"$cache/mvn.log" 2>&1; then
    cat "$cache/mvn.log" >&2
    exit 3
  fi
  mv "$cache/classpath.tmp" "$cache/classpath"
fi
if [ ! "$cache/classes/BkInterop.class" -nt "$here/BkInterop.java" ]; then
  mkdir -p "$cache/classes"
  javac -nowarn -d "$cache/classes" -cp "$(cat "$cache/classpath")" "$here/BkInterop.java" >&2
fi
# Log4j2 (BookKeeper's logging backend) to standard error only: standard output carries answers.
cat >"$cache/log4j2.xml" <<'XML'
<Configuration status="WARN">
  <Appenders><Console name="err" target="SYSTEM_ERR"><PatternLayout pattern="%d{HH:mm:ss.SSS} %-5p %c{1} %m%n"/></Console></Appenders>
  <Loggers><Root level="${env:BK_INTEROP_LOG_LEVEL:-WARN}"><AppenderRef ref="err"/></Root></Loggers>
</Configuration>
XML
echo "$cache/classes:$(cat "$cache/classpath")"
echo "$cache/log4j2.xml"
