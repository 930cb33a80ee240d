package dev.magnetar.javaclient;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Batching (with batch-index acknowledgement), chunking, and the four compression codecs. */
class MessagingFeaturesTest extends ClientTestBase {

    private Consumer<byte[]> subscribe(String topic, String sub) throws Exception {
        return client.newConsumer().topic(topic).subscriptionName(sub)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
    }

    @Test
    void batchesArriveWholeAndInOrder() throws Exception {
        String topic = Env.topic("batching");
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
                     .enableBatching(true).batchingMaxMessages(10)
                     .batchingMaxPublishDelay(1, TimeUnit.SECONDS).create()) {
            List<CompletableFuture<MessageId>> sent = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                sent.add(producer.sendAsync("m" + i));
            }
            producer.flush();
            CompletableFuture.allOf(sent.toArray(new CompletableFuture[0])).get(30, TimeUnit.SECONDS);
            int batched = 0;
            for (int i = 0; i < 50; i++) {
                Message<String> m = receive(consumer);
                assertEquals("m" + i, m.getValue());
                MessageIdAdv id = (MessageIdAdv) m.getMessageId();
                if (id.getBatchSize() > 1) {
                    batched++;
                    assertTrue(id.getBatchIndex() >= 0 && id.getBatchIndex() < id.getBatchSize());
                }
                consumer.acknowledge(m);
            }
            assertTrue(batched >= 40, "only " + batched + " of 50 messages came in batches");
            TopicStats stats = admin.topics().getStats(topic);
            assertEquals(50, stats.getMsgInCounter());
            assertTrue(stats.getPublishers().isEmpty() || stats.getPublishers().get(0).getMsgRateIn() >= 0);
        }
    }

    @Test
    void batchIndexAcknowledgementRedeliversOnlyTheUnacked() throws Exception {
        String topic = Env.topic("batch-index-ack");
        Consumer<String> first = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscriptionType(SubscriptionType.Shared).enableBatchIndexAcknowledgment(true).subscribe();
        try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
                .enableBatching(true).batchingMaxMessages(10).batchingMaxPublishDelay(1, TimeUnit.SECONDS)
                .create()) {
            for (int i = 0; i < 10; i++) {
                producer.sendAsync("m" + i);
            }
            producer.flush();
            for (int i = 0; i < 10; i++) {
                Message<String> m = receive(first);
                if (i % 2 == 0) {
                    first.acknowledge(m);
                }
            }
            first.close();
            try (Consumer<String> second = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                    .subscriptionType(SubscriptionType.Shared).enableBatchIndexAcknowledgment(true).subscribe()) {
                List<String> again = new ArrayList<>();
                for (int i = 0; i < 5; i++) {
                    Message<String> m = receive(second);
                    again.add(m.getValue());
                    second.acknowledge(m);
                }
                assertEquals(List.of("m1", "m3", "m5", "m7", "m9"), again);
                assertNull(second.receive(500, TimeUnit.MILLISECONDS), "an acknowledged message came back");
            }
        }
    }

    @Test
    void chunkedMessagesLargerThanTheBrokerLimitArriveWhole() throws Exception {
        String topic = Env.topic("chunking");
        byte[] big = new byte[6 * 1024 * 1024]; // over the 5 MB maxMessageSize
        new Random(7).nextBytes(big);
        byte[] medium = new byte[300 * 1024];
        new Random(8).nextBytes(medium);
        try (Consumer<byte[]> consumer = subscribe(topic, "sub");
             Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false)
                     .enableChunking(true).chunkMaxMessageSize(100 * 1024).create()) {
            producer.newMessage().key("big").value(big).send();
            producer.newMessage().key("medium").value(medium).send();
            producer.send("small".getBytes(StandardCharsets.UTF_8));
            Message<byte[]> m1 = receive(consumer);
            assertEquals("big", m1.getKey());
            assertArrayEquals(big, m1.getValue());
            Message<byte[]> m2 = receive(consumer);
            assertArrayEquals(medium, m2.getValue());
            Message<byte[]> m3 = receive(consumer);
            assertEquals("small", new String(m3.getValue(), StandardCharsets.UTF_8));
            consumer.acknowledge(m1);
            consumer.acknowledge(m2);
            consumer.acknowledge(m3);
            // set by the broker's next stats update, as in Pulsar (the suite runs it every second)
            long deadline = System.currentTimeMillis() + RECEIVE_MS;
            while (!admin.topics().getStats(topic).isMsgChunkPublished() && System.currentTimeMillis() < deadline) {
                Thread.sleep(100);
            }
            assertTrue(admin.topics().getStats(topic).isMsgChunkPublished(), "msgChunkPublished not set");
        }
    }

    @ParameterizedTest(name = "{0}, batching {1}")
    @CsvSource({"LZ4,true", "LZ4,false", "ZLIB,true", "ZLIB,false", "ZSTD,true", "ZSTD,false",
                "SNAPPY,true", "SNAPPY,false"})
    void compressionCodecsRoundTrip(CompressionType codec, boolean batching) throws Exception {
        String topic = Env.topic("compression-" + codec.name().toLowerCase());
        char[] text = new char[20_000];
        Arrays.fill(text, 'z');
        String payload = new String(text);
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
                     .compressionType(codec).enableBatching(batching).create()) {
            for (int i = 0; i < 20; i++) {
                producer.sendAsync(i + payload);
            }
            producer.flush();
            for (int i = 0; i < 20; i++) {
                Message<String> m = receive(consumer);
                assertEquals(i + payload, m.getValue());
                consumer.acknowledge(m);
            }
            TopicStats stats = admin.topics().getStats(topic);
            assertTrue(stats.getBytesInCounter() < 20L * payload.length() / 10,
                    "stored uncompressed: " + stats.getBytesInCounter() + " bytes in");
        }
    }
}
