package dev.magnetar.javaclient;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.LongRunningProcessStatus;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.TableView;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

/** Topic compaction through the admin client, read-compacted readers, and the client's TableView. */
class CompactionTableViewTest extends ClientTestBase {

    private void produceKeyed(String topic) throws Exception {
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create()) {
            p.newMessage().key("a").value("a1").send();
            p.newMessage().key("b").value("b1").send();
            p.newMessage().key("a").value("a2").send();
            p.newMessage().key("c").value("c1").send();
            p.newMessage().key("b").value(null).send(); // tombstone: b is deleted
            p.newMessage().key("a").value("a3").send();
        }
    }

    private static Map<String, String> snapshot(TableView<String> view) {
        Map<String, String> out = new HashMap<>();
        view.forEach(out::put);
        return out;
    }

    private void compact(String topic) throws Exception {
        admin.topics().triggerCompaction(topic);
        long deadline = System.currentTimeMillis() + 60_000;
        LongRunningProcessStatus status = admin.topics().compactionStatus(topic);
        while (status.status != LongRunningProcessStatus.Status.SUCCESS && System.currentTimeMillis() < deadline) {
            assertFalse(status.status == LongRunningProcessStatus.Status.ERROR, "compaction failed: " + status.lastError);
            Thread.sleep(200);
            status = admin.topics().compactionStatus(topic);
        }
        assertEquals(LongRunningProcessStatus.Status.SUCCESS, status.status);
    }

    @Test
    void compactedReadersSeeTheLatestValueOfEachKey() throws Exception {
        String topic = Env.topic("compaction");
        // a subscription keeps the messages while nothing else retains them
        admin.topics().createSubscription(topic, "keep", MessageId.earliest);
        produceKeyed(topic);
        compact(topic);
        Map<String, String> seen = new HashMap<>();
        try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.earliest)
                .readCompacted(true).create()) {
            while (reader.hasMessageAvailable()) {
                Message<String> m = reader.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS);
                assertNotNull(m);
                assertNull(seen.put(m.getKey(), m.getValue()), "key " + m.getKey() + " read twice");
            }
        }
        assertEquals(Map.of("a", "a3", "c", "c1"), seen);
        PersistentTopicInternalStats internal = admin.topics().getInternalStats(topic);
        assertNotNull(internal.compactedLedger, "no compacted ledger in the internal stats");
        // a reader that does not read compacted still sees all six
        int all = 0;
        try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic).startMessageId(MessageId.earliest)
                .create()) {
            while (reader.hasMessageAvailable()) {
                assertNotNull(reader.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS));
                all++;
            }
        }
        assertEquals(6, all);
    }

    @Test
    void tableViewFollowsTheTopic() throws Exception {
        String topic = Env.topic("tableview");
        produceKeyed(topic);
        try (TableView<String> view = client.newTableView(Schema.STRING).topic(topic).create()) {
            assertEquals(Map.of("a", "a3", "c", "c1"), snapshot(view));
            Map<String, String> heard = new ConcurrentHashMap<>();
            view.forEachAndListen((k, v) -> {
                if (v != null) {
                    heard.put(k, v);
                }
            });
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).create()) {
                p.newMessage().key("d").value("d1").send();
                p.newMessage().key("a").value("a4").send();
            }
            long deadline = System.currentTimeMillis() + RECEIVE_MS;
            while (!"a4".equals(view.get("a")) && System.currentTimeMillis() < deadline) {
                Thread.sleep(50);
            }
            assertEquals("a4", view.get("a"));
            assertEquals("d1", view.get("d"));
            assertEquals(3, view.size());
            assertEquals("a4", heard.get("a"));
        }
    }

    @Test
    void tableViewReadsACompactedTopic() throws Exception {
        String topic = Env.topic("tableview-compacted");
        admin.topics().createSubscription(topic, "keep", MessageId.earliest);
        produceKeyed(topic);
        compact(topic);
        try (TableView<String> view = client.newTableView(Schema.STRING).topic(topic).create()) {
            assertEquals(Map.of("a", "a3", "c", "c1"), snapshot(view));
        }
    }
}
