package dev.magnetar.javaclient;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
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
                ProcessHandle.current().info().command().orElse("java"), "-Xmx256m", "-cp", cp,
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
        Path work = Files.createTempDirectory("pulsar-perf");
        String topic = Env.topic("perf");
        admin.topics().createSubscription(topic, "perf-sub", MessageId.earliest);
        String[] auth = {"-u", Env.serviceUrl(), "--auth-plugin",
                "org.apache.pulsar.client.impl.auth.AuthenticationToken", "--auth-params", "token:" + Env.adminToken()};
        List<String> produce = new ArrayList<>(List.of("produce"));
        produce.addAll(List.of(auth));
        produce.addAll(List.of("-m", Integer.toString(MESSAGES), "-r", "2000", "-s", "512", topic));
        String out = run(work, "produce", produce.toArray(new String[0]));
        assertFalse(out.contains("Exception"), out);
        TopicStats stats = admin.topics().getStats(topic);
        assertTrue(stats.getMsgInCounter() >= MESSAGES, "stored " + stats.getMsgInCounter() + "\n" + out);
        assertEquals(stats.getMsgInCounter(), stats.getSubscriptions().get("perf-sub").getMsgBacklog());

        List<String> consume = new ArrayList<>(List.of("consume"));
        consume.addAll(List.of(auth));
        consume.addAll(List.of("-ss", "perf-sub", "-m", Long.toString(stats.getMsgInCounter()), topic));
        out = run(work, "consume", consume.toArray(new String[0]));
        long deadline = System.currentTimeMillis() + 10_000;
        long backlog = admin.topics().getStats(topic).getSubscriptions().get("perf-sub").getMsgBacklog();
        while (backlog != 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
            backlog = admin.topics().getStats(topic).getSubscriptions().get("perf-sub").getMsgBacklog();
        }
        assertEquals(0, backlog, "pulsar-perf consume left a backlog\n" + out);
    }
}
