package dev.magnetar.javaclient;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Consumer seek by message id and by publish time; readers from earliest, latest and a given id. */
class SeekReaderTest extends ClientTestBase {

    private List<MessageId> produce(String topic, int from, int count) throws Exception {
        List<MessageId> ids = new ArrayList<>();
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create()) {
            for (int i = from; i < from + count; i++) {
                ids.add(p.send("m" + i));
            }
        }
        return ids;
    }

    private Reader<String> reader(String topic, MessageId start, boolean inclusive) throws Exception {
        var builder = client.newReader(Schema.STRING).topic(topic).startMessageId(start);
        if (inclusive) {
            builder.startMessageIdInclusive();
        }
        return builder.create();
    }

    @Test
    void seekByMessageIdReplaysWhatFollowsThatMessage() throws Exception {
        String topic = Env.topic("seek-id");
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscribe()) {
            List<MessageId> ids = produce(topic, 0, 10);
            for (int i = 0; i < 10; i++) {
                c.acknowledge(receive(c));
            }
            // the broker rewinds to the message itself; the 4.x client then skips it (startMessageId
            // is exclusive unless startMessageIdInclusive), so replay starts after it
            c.seek(ids.get(3));
            for (int i = 4; i < 10; i++) {
                assertEquals("m" + i, receive(c).getValue());
            }
            c.seek(MessageId.earliest);
            assertEquals("m0", receive(c).getValue());
            c.seek(MessageId.latest);
            assertNull(c.receive(500, TimeUnit.MILLISECONDS), "a message after seeking to latest");
        }
    }

    @Test
    void seekByTimeStartsAtTheFirstMessagePublishedThen() throws Exception {
        String topic = Env.topic("seek-time");
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscribe()) {
            produce(topic, 0, 5);
            long between = System.currentTimeMillis();
            while (System.currentTimeMillis() <= between + 5) {
                Thread.onSpinWait(); // the next publish time is strictly later
            }
            produce(topic, 5, 5);
            for (int i = 0; i < 10; i++) {
                c.acknowledge(receive(c));
            }
            c.seek(between + 1);
            Message<String> m = receive(c);
            assertEquals("m5", m.getValue());
            assertTrue(m.getPublishTime() > between);
            c.seek(0L);
            assertEquals("m0", receive(c).getValue());
        }
    }

    @Test
    void readersStartWhereTheyAreTold() throws Exception {
        String topic = Env.topic("reader");
        List<MessageId> ids = produce(topic, 0, 5);
        try (Reader<String> earliest = reader(topic, MessageId.earliest, false)) {
            for (int i = 0; i < 5; i++) {
                assertTrue(earliest.hasMessageAvailable());
                assertEquals("m" + i, earliest.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS).getValue());
            }
            assertFalse(earliest.hasMessageAvailable());
        }
        try (Reader<String> exclusive = reader(topic, ids.get(2), false);
             Reader<String> inclusive = reader(topic, ids.get(2), true);
             Reader<String> latest = reader(topic, MessageId.latest, false)) {
            assertEquals("m3", exclusive.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS).getValue());
            assertEquals("m2", inclusive.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS).getValue());
            assertFalse(latest.hasMessageAvailable());
            produce(topic, 5, 1);
            Message<String> m = latest.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS);
            assertNotNull(m);
            assertEquals("m5", m.getValue());
            latest.seek(ids.get(0));
            assertEquals("m1", latest.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS).getValue());
        }
        try (Reader<String> last = reader(topic, MessageId.latest, true)) {
            // the client moves a latest-inclusive reader onto the last message when asked whether one is available
            assertTrue(last.hasMessageAvailable());
            assertEquals("m5", last.readNext(RECEIVE_MS, TimeUnit.MILLISECONDS).getValue(),
                    "latest inclusive reads the last message");
        }
        assertEquals(0, admin.topics().getSubscriptions(topic).size(), "a reader left its subscription");
    }

    @Test
    void lastMessageIdIsTheLastPublished() throws Exception {
        String topic = Env.topic("last-id");
        List<MessageId> ids = produce(topic, 0, 3);
        try (Consumer<String> c = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
            assertEquals(ids.get(2), c.getLastMessageId());
            assertEquals(ids.get(2), admin.topics().getLastMessageId(topic));
        }
    }
}
