package dev.magnetar.javaclient;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Produce and consume on each of the four subscription types, with the rule that sets it apart. */
class SubscriptionTypesTest extends ClientTestBase {

    private Consumer<String> subscribe(String topic, String sub, SubscriptionType type, String name)
            throws PulsarClientException {
        return client.newConsumer(Schema.STRING).topic(topic).subscriptionName(sub).subscriptionType(type)
                .consumerName(name).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe();
    }

    private Producer<String> producer(String topic) throws PulsarClientException {
        return client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create();
    }

    @Test
    void exclusiveAdmitsOneConsumer() throws Exception {
        String topic = Env.topic("exclusive");
        try (Consumer<String> c1 = subscribe(topic, "sub", SubscriptionType.Exclusive, "c1");
             Producer<String> p = producer(topic)) {
            assertThrows(PulsarClientException.ConsumerBusyException.class,
                    () -> subscribe(topic, "sub", SubscriptionType.Exclusive, "c2"));
            for (int i = 0; i < 10; i++) {
                p.send("m" + i);
            }
            for (int i = 0; i < 10; i++) {
                Message<String> m = receive(c1);
                assertEquals("m" + i, m.getValue());
                c1.acknowledge(m);
            }
        }
    }

    @Test
    void failoverMovesToTheStandbyWithWhatIsUnacked() throws Exception {
        String topic = Env.topic("failover");
        Consumer<String> c1 = subscribe(topic, "sub", SubscriptionType.Failover, "a-first");
        try (Consumer<String> c2 = subscribe(topic, "sub", SubscriptionType.Failover, "b-second");
             Producer<String> p = producer(topic)) {
            for (int i = 0; i < 10; i++) {
                p.send("m" + i);
            }
            // the active consumer of a non-partitioned topic is the first by name
            for (int i = 0; i < 5; i++) {
                Message<String> m = receive(c1);
                assertEquals("m" + i, m.getValue());
                c1.acknowledge(m);
            }
            assertNull(c2.receive(300, TimeUnit.MILLISECONDS), "the standby received a message");
            c1.close();
            for (int i = 5; i < 10; i++) {
                Message<String> m = receive(c2);
                assertEquals("m" + i, m.getValue());
                c2.acknowledge(m);
            }
        }
    }

    @Test
    void sharedSpreadsMessagesOnceEach() throws Exception {
        String topic = Env.topic("shared");
        try (Consumer<String> c1 = subscribe(topic, "sub", SubscriptionType.Shared, "c1");
             Consumer<String> c2 = subscribe(topic, "sub", SubscriptionType.Shared, "c2");
             Producer<String> p = producer(topic)) {
            int n = 100;
            for (int i = 0; i < n; i++) {
                p.sendAsync("m" + i);
            }
            p.flush();
            Set<String> seen = new HashSet<>();
            int[] perConsumer = new int[2];
            List<Consumer<String>> consumers = List.of(c1, c2);
            long deadline = System.currentTimeMillis() + 20_000;
            while (seen.size() < n && System.currentTimeMillis() < deadline) {
                for (int k = 0; k < 2; k++) {
                    Message<String> m = consumers.get(k).receive(50, TimeUnit.MILLISECONDS);
                    if (m != null) {
                        assertTrue(seen.add(m.getValue()), "delivered twice: " + m.getValue());
                        perConsumer[k]++;
                        consumers.get(k).acknowledge(m);
                    }
                }
            }
            assertEquals(n, seen.size());
            assertTrue(perConsumer[0] > 0 && perConsumer[1] > 0,
                    "one consumer got everything: " + perConsumer[0] + "/" + perConsumer[1]);
        }
    }

    @Test
    void keySharedKeepsEachKeyOnOneConsumer() throws Exception {
        String topic = Env.topic("key-shared");
        try (Consumer<String> c1 = subscribe(topic, "sub", SubscriptionType.Key_Shared, "c1");
             Consumer<String> c2 = subscribe(topic, "sub", SubscriptionType.Key_Shared, "c2");
             Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false)
                     .create()) {
            int n = 200;
            for (int i = 0; i < n; i++) {
                p.newMessage().key("key-" + (i % 20)).value(Integer.toString(i)).sendAsync();
            }
            p.flush();
            Map<String, Integer> owner = new HashMap<>();
            Map<String, List<Integer>> order = new HashMap<>();
            List<Consumer<String>> consumers = List.of(c1, c2);
            int got = 0;
            long deadline = System.currentTimeMillis() + 20_000;
            while (got < n && System.currentTimeMillis() < deadline) {
                for (int k = 0; k < 2; k++) {
                    Message<String> m = consumers.get(k).receive(50, TimeUnit.MILLISECONDS);
                    if (m != null) {
                        got++;
                        Integer before = owner.putIfAbsent(m.getKey(), k);
                        assertEquals(before == null ? k : before, k, "key " + m.getKey() + " on two consumers");
                        order.computeIfAbsent(m.getKey(), x -> new ArrayList<>()).add(Integer.parseInt(m.getValue()));
                        consumers.get(k).acknowledge(m);
                    }
                }
            }
            assertEquals(n, got);
            assertEquals(2, new HashSet<>(owner.values()).size(), "every key went to one consumer: " + owner);
            for (List<Integer> values : order.values()) {
                List<Integer> sorted = new ArrayList<>(values);
                sorted.sort(null);
                assertEquals(sorted, values, "a key's messages out of order");
            }
        }
    }
}
