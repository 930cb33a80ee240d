#!/usr/bin/env bash
# Build AvroOracle.java against Avro's Java library from Maven Central, in a cache outside the
# repository; print the java command line that runs it (classpath and class name), one word a line.
#   tests/resources/avro_oracle/build.sh [AVRO_VERSION]
# Exit status: 0 built (or already built), 3 Maven Central could not be reached or the artifacts
# could not be fetched, 4 java, javac or mvn missing, other: the build failed.
set -euo pipefail
version=${1:-1.11.4}
here=$(cd "$(dirname "$0")" && pwd)
cache=${MAGNETAR_ORACLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/magnetar/avro-oracle}/$version
for tool in java javac mvn; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 4; }
done
mkdir -p "$cache"
if [ ! -s "$cache/classpath" ]; then
  cat >"$cache/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.magnetar</groupId><artifactId>avro-oracle</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>org.apache.avro</groupId><artifactId>avro</artifactId><version>$version</version></dependency>
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
if [ ! "$cache/classes/AvroOracle.class" -nt "$here/AvroOracle.java" ]; then
  mkdir -p "$cache/classes"
  javac -nowarn -d "$cache/classes" -cp "$(cat "$cache/classpath")" "$here/AvroOracle.java" >&2
fi
echo java
echo -cp
echo "$cache/classes:$(cat "$cache/classpath")"
echo AvroOracle
