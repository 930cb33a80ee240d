package magnetar.pulsarspark;

import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryProgress;
import org.apache.spark.sql.streaming.Trigger;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A Spark Structured Streaming job written against StreamNative's pulsar-spark connector (format
 * "pulsar"), in local mode, as a Pulsar user would write it. Each mode runs one query with
 * Trigger.AvailableNow and prints one line "RESULT mode=... rows=N seconds=S" when it ends:
 *
 *   copy  --in T --out U: the messages of T (value, key, event time) into U
 *   read  --in T: the messages of T into Spark's "noop" sink (read throughput)
 *   write --parquet DIR --out U: the rows of a Parquet directory (one binary column "value") into U
 *
 * The exit status is 0 when the query ended without error, 3 otherwise.
 */
public final class PulsarSparkJob {
  private PulsarSparkJob() {}

  public static void main(String[] argv) {
    Map<String, String> a = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
    }
    String mode = a.getOrDefault("mode", "copy");
    SparkSession spark = SparkSession.builder()
        .master(a.getOrDefault("master", "local[2]"))
        .appName("pulsar-spark-" + mode)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", a.get("checkpoint") + "-local")
        .getOrCreate();
    spark.sparkContext().setLogLevel("WARN");
    int status = 0;
    try {
      int runs = Integer.parseInt(a.getOrDefault("runs", "1"));
      for (int run = 0; run < runs; run++) {
        run(spark, mode, a, a.get("checkpoint") + "-" + run, run);
      }
    } catch (Exception e) {
      e.printStackTrace();
      status = 3;
    }
    spark.stop();
    // the connector's cached Pulsar clients keep non-daemon threads alive
    System.exit(status);
  }

  private static Dataset<Row> readTopic(SparkSession spark, Map<String, String> a) {
    return spark.readStream().format("pulsar")
        .option("service.url", a.get("service-url"))
        .option("admin.url", a.get("admin-url"))
        .option("topic", a.get("in"))
        .option("startingOffsets", "earliest")
        .load();
  }

  private static void run(SparkSession spark, String mode, Map<String, String> a, String checkpoint, int run)
      throws Exception {
    Dataset<Row> out;
    String format = "pulsar";
    switch (mode) {
      case "copy":
        out = readTopic(spark, a).selectExpr("value", "__key", "__eventTime");
        break;
      case "read":
        out = readTopic(spark, a).selectExpr("value");
        format = "noop";
        break;
      case "write":
        StructType schema = new StructType().add("value", DataTypes.BinaryType);
        out = spark.readStream().schema(schema).parquet(a.get("parquet"));
        break;
      default:
        throw new IllegalArgumentException("unknown mode " + mode);
    }
    if (format.equals("pulsar")) {
      // pulsar-spark 3.1's sink builds the "topic" option into a Literal that Spark 3.3 and newer
      // refuse (a java.lang.String where a UTF8String is expected); a __topic column takes its place
      out = out.withColumn("__topic", org.apache.spark.sql.functions.lit(a.get("out") + suffix(a, run)));
    }
    long start = System.nanoTime();
    StreamingQuery q = out.writeStream().format(format)
        .option("service.url", a.get("service-url"))
        .option("admin.url", a.get("admin-url"))
        // the connector's producers fail a task once 1000 messages await their acknowledgement
        // (the Pulsar 2.x client's default, ProducerQueueIsFullError); a user sets this
        .option("pulsar.producer.blockIfQueueFull", "true")
        .option("checkpointLocation", checkpoint)
        .trigger(Trigger.AvailableNow())
        .start();
    q.awaitTermination();
    double seconds = (System.nanoTime() - start) / 1e9;
    long rows = 0;
    for (StreamingQueryProgress p : q.recentProgress()) {
      rows += p.numInputRows();
    }
    System.out.printf("RESULT mode=%s run=%d rows=%d seconds=%.3f%n", mode, run, rows, seconds);
    System.out.flush();
  }

  private static String suffix(Map<String, String> a, int run) {
    return Integer.parseInt(a.getOrDefault("runs", "1")) > 1 ? "-" + run : "";
  }
}
