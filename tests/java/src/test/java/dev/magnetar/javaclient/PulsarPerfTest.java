package dev.magnetar.javaclient;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * pulsar-perf (pulsar-testclient, its own class path resolved by the script) produces a fixed
 * number of messages and consumes them back through a subscription made beforehand, with token
 * authentication, as the performance comparisons run it.
 */
class PulsarPerfTest extends ClientTestBase {
    static final int MESSAGES = 5_000;

    private String run(Path workDir, String name, String... args) throws Exception {
        String cp = Env.get("MAGNETAR_PERF_CLASSPATH");
        Path conf = workDir.resolve("client.conf");
        Files.writeString(conf, ""); // its first argument is a client config file; defaults suffice
        List<String> cmd = new ArrayList<>(List.of(
                ProcessHandle.current().info().command().orElse("java"), "-Xmx1g", "-cp", cp,
                "org.apache.pulsar.testclient.PulsarPerfTestTool", conf.toString()));
        cmd.addAll(List.of(args));
        File log = workDir.resolve(name + ".log").toFile();
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log).start();
        try {
            assertTrue(p.waitFor(120, TimeUnit.SECONDS), "pulsar-perf " + name + " did not finish");
        } finally {
            p.destroyForcibly();
        }
        String out = Files.readString(log.toPath());
        assertEquals(0, p.exitValue(), "pulsar-perf " + name + " failed:\n" + out);
        return out;
    }

    @Test
    void produceThenConsume() throws Exception {
        // under the run's work directory, which the script removes afterwards
        Path work = Files.createTempDirectory(Path.of(Env.get("MAGNETAR_WORK_DIR")), "pulsar-perf");
        String topic = Env.topic("perf");
        admin.topics().createSubscription(topic, "perf-sub", MessageId.earliest);
        String[] auth = {"-u", Env.serviceUrl(), "--auth-plugin",
                "org.apache.pulsar.client.impl.auth.AuthenticationToken", "--auth-params", "token:" + Env.adminToken()};
        List<String> produce = new ArrayList<>(List.of("produce"));
        produce.addAll(List.of(auth));
        produce.addAll(List.of("-m", Integer.toString(MESSAGES), "-r", "5000", "-s", "512", topic));
        String out = run(work, "produce", produce.toArray(new String[0]));
        assertTrue(out.contains("DONE (reached the maximum number: " + MESSAGES), out);
        TopicStats stats = admin.topics().getStats(topic);
        assertTrue(stats.getMsgInCounter() >= MESSAGES, "stored " + stats.getMsgInCounter() + "\n" + out);
        // msgBacklog counts entries, as Pulsar's does: pulsar-perf batches, so there are fewer
        long entries = stats.getSubscriptions().get("perf-sub").getMsgBacklog();
        assertTrue(entries > 0 && entries <= stats.getMsgInCounter(), "backlog " + entries);

        List<String> consume = new ArrayList<>(List.of("consume"));
        consume.addAll(List.of(auth));
        consume.addAll(List.of("-ss", "perf-sub", "-m", Long.toString(stats.getMsgInCounter()), topic));
        out = run(work, "consume", consume.toArray(new String[0]));
        // it exits on reaching the count, before its grouped acknowledgements go out, so the
        // backlog it leaves says nothing; what it received and what the broker sent do
        Matcher received = Pattern.compile("--- (\\d+) records received").matcher(out);
        assertTrue(received.find(), out);
        assertEquals(stats.getMsgInCounter(), Long.parseLong(received.group(1)), out);
        assertEquals(stats.getMsgInCounter(),
                admin.topics().getStats(topic).getSubscriptions().get("perf-sub").getMsgOutCounter());
    }
}
