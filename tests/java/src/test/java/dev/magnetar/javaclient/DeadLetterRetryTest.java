package dev.magnetar.javaclient;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

/** Dead-letter topics after negative acknowledgements, and the retry-letter topic of reconsumeLater. */
class DeadLetterRetryTest extends ClientTestBase {

    @Test
    void negativelyAcknowledgedMessagesEndInTheDeadLetterTopic() throws Exception {
        String topic = Env.topic("dlq-src");
        String dlq = topic + "-DLQ";
        try (Consumer<String> dead = client.newConsumer(Schema.STRING).topic(dlq).subscriptionName("inspect")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("work")
                     .subscriptionType(SubscriptionType.Shared)
                     .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2).deadLetterTopic(dlq).build())
                     .subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            for (int i = 0; i < 3; i++) {
                producer.newMessage().key("k" + i).property("n", Integer.toString(i)).value("m" + i).send();
            }
            // each message is delivered 1 + maxRedeliverCount times, then moved
            int deliveries = 0;
            List<Integer> counts = new ArrayList<>();
            while (deliveries < 9) {
                Message<String> m = receive(consumer);
                counts.add(m.getRedeliveryCount());
                consumer.negativeAcknowledge(m);
                deliveries++;
            }
            assertEquals(new TreeSet<>(List.of(0, 1, 2)), new TreeSet<>(counts));
            TreeSet<String> moved = new TreeSet<>();
            for (int i = 0; i < 3; i++) {
                Message<String> m = receive(dead);
                moved.add(m.getValue());
                assertEquals("k" + m.getValue().substring(1), m.getKey());
                assertEquals(m.getValue().substring(1), m.getProperty("n"));
                assertEquals(topic, m.getProperty("REAL_TOPIC"));
                assertNotNull(m.getProperty("ORIGIN_MESSAGE_ID"));
                dead.acknowledge(m);
            }
            assertEquals(new TreeSet<>(List.of("m0", "m1", "m2")), moved);
            assertNull(consumer.receive(1, TimeUnit.SECONDS), "a dead-lettered message came back");
        }
    }

    @Test
    void reconsumeLaterGoesThroughTheRetryTopicThenToTheDeadLetterTopic() throws Exception {
        String topic = Env.topic("retry-src");
        String retry = topic + "-RETRY";
        String dlq = topic + "-DLQ";
        try (Consumer<String> dead = client.newConsumer(Schema.STRING).topic(dlq).subscriptionName("inspect")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("work")
                     .subscriptionType(SubscriptionType.Shared).enableRetry(true)
                     .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                             .retryLetterTopic(retry).deadLetterTopic(dlq).build())
                     .subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
            producer.newMessage().key("k").property("origin", "yes").value("again").send();
            List<String> times = new ArrayList<>();
            List<String> topics = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                Message<String> m = receive(consumer);
                assertEquals("again", m.getValue());
                assertEquals("yes", m.getProperty("origin"));
                times.add(m.getProperty("RECONSUMETIMES"));
                topics.add(m.getTopicName());
                consumer.reconsumeLater(m, 200, TimeUnit.MILLISECONDS);
            }
            assertEquals(java.util.Arrays.asList(null, "1", "2"), times);
            assertEquals(topic, topics.get(0));
            assertEquals(retry, topics.get(1));
            Message<String> m = receive(dead);
            assertEquals("again", m.getValue());
            assertEquals("k", m.getKey());
            Map<String, String> props = m.getProperties();
            assertEquals("yes", props.get("origin"));
            dead.acknowledge(m);
            assertNull(consumer.receive(1, TimeUnit.SECONDS), "the retried message came back after the DLQ");
        }
    }
}
