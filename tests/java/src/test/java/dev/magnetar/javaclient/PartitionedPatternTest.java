package dev.magnetar.javaclient;

import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Partitioned topics (routing, keys, a partition added later) and pattern subscriptions. */
class PartitionedPatternTest extends ClientTestBase {

    @Test
    void partitionedTopicSpreadsAndKeepsKeysTogether() throws Exception {
        String topic = Env.topic("partitioned");
        admin.topics().createPartitionedTopic(topic, 4);
        assertEquals(4, client.getPartitionsForTopic(topic).get(10, TimeUnit.SECONDS).size());
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .subscriptionType(SubscriptionType.Shared).subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
                     .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).enableBatching(false).create()) {
            for (int i = 0; i < 40; i++) {
                producer.newMessage().key("key-" + (i % 5)).value("m" + i).send();
            }
            Set<String> values = new HashSet<>();
            Map<String, String> partitionOfKey = new HashMap<>();
            Set<Integer> partitions = new HashSet<>();
            for (int i = 0; i < 40; i++) {
                Message<String> m = receive(consumer);
                values.add(m.getValue());
                String partition = m.getTopicName();
                assertTrue(partition.startsWith(topic + "-partition-"), partition);
                String before = partitionOfKey.putIfAbsent(m.getKey(), partition);
                assertEquals(before == null ? partition : before, partition, "a key on two partitions");
                int index = ((MessageIdAdv) m.getMessageId()).getPartitionIndex();
                assertEquals(partition, topic + "-partition-" + index);
                partitions.add(index);
                consumer.acknowledge(m);
            }
            assertEquals(40, values.size());
            assertTrue(partitions.size() > 1, "every message on one partition");
        }
        admin.topics().updatePartitionedTopic(topic, 6);
        assertEquals(6, admin.topics().getPartitionedTopicMetadata(topic).partitions);
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("after")
                     .subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
                     .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).enableBatching(false).create()) {
            Set<String> seen = new HashSet<>();
            for (int i = 0; i < 12; i++) {
                producer.send("n" + i);
            }
            for (int i = 0; i < 12; i++) {
                Message<String> m = receive(consumer);
                seen.add(m.getTopicName());
                consumer.acknowledge(m);
            }
            assertTrue(seen.contains(topic + "-partition-5"), "the new partitions got nothing: " + seen);
        }
    }

    @Test
    void patternSubscriptionFindsTopicsCreatedLater() throws Exception {
        String prefix = Env.unique("pattern");
        String t1 = "persistent://public/default/" + prefix + "-one";
        String t2 = "persistent://public/default/" + prefix + "-two";
        String later = "persistent://public/default/" + prefix + "-later";
        String other = "persistent://public/default/other-" + prefix;
        admin.topics().createNonPartitionedTopic(t1);
        admin.topics().createPartitionedTopic(t2, 2);
        admin.topics().createNonPartitionedTopic(other);
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING)
                .topicsPattern(Pattern.compile("persistent://public/default/" + prefix + "-.*"))
                .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS).subscribe()) {
            for (String t : new String[] {t1, t2, other}) {
                try (Producer<String> p = client.newProducer(Schema.STRING).topic(t).create()) {
                    p.send(t);
                }
            }
            Set<String> got = new HashSet<>();
            for (int i = 0; i < 2; i++) {
                Message<String> m = receive(consumer);
                got.add(m.getValue());
                consumer.acknowledge(m);
            }
            assertEquals(Set.of(t1, t2), got);
            admin.topics().createNonPartitionedTopic(later);
            try (Producer<String> p = client.newProducer(Schema.STRING).topic(later).create()) {
                p.send(later);
            }
            Message<String> m = consumer.receive(20, TimeUnit.SECONDS);
            assertEquals(later, m == null ? null : m.getValue(), "the topic created later was not picked up");
        }
    }
}
