package dev.magnetar.javaclient;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Shared, Exclusive, WaitForExclusive and ExclusiveWithFencing producers, errors as Pulsar's broker gives them. */
class ProducerAccessModeTest extends ClientTestBase {

    private Producer<String> producer(String topic, ProducerAccessMode mode) throws PulsarClientException {
        return client.newProducer(Schema.STRING).topic(topic).accessMode(mode).create();
    }

    private CompletableFuture<Producer<String>> producerAsync(String topic, ProducerAccessMode mode) {
        return client.newProducer(Schema.STRING).topic(topic).accessMode(mode).createAsync();
    }

    @Test
    void sharedProducersCoexistAndExclusiveIsFencedByThem() throws Exception {
        String topic = Env.topic("access-shared");
        try (Producer<String> a = producer(topic, ProducerAccessMode.Shared);
             Producer<String> b = producer(topic, ProducerAccessMode.Shared)) {
            a.send("a");
            b.send("b");
            assertThrows(PulsarClientException.ProducerFencedException.class,
                    () -> producer(topic, ProducerAccessMode.Exclusive));
        }
    }

    @Test
    void exclusiveRefusesEveryOtherProducer() throws Exception {
        String topic = Env.topic("access-exclusive");
        try (Producer<String> owner = producer(topic, ProducerAccessMode.Exclusive)) {
            owner.send("mine");
            assertThrows(PulsarClientException.ProducerBusyException.class,
                    () -> producer(topic, ProducerAccessMode.Shared));
            assertThrows(PulsarClientException.ProducerFencedException.class,
                    () -> producer(topic, ProducerAccessMode.Exclusive));
        }
        // once it is gone another may take the topic
        try (Producer<String> next = producer(topic, ProducerAccessMode.Exclusive)) {
            next.send("next");
        }
    }

    @Test
    void waitForExclusiveWaitsForTheOwnerToLeave() throws Exception {
        String topic = Env.topic("access-wait");
        Producer<String> owner = producer(topic, ProducerAccessMode.Exclusive);
        CompletableFuture<Producer<String>> waiting = producerAsync(topic, ProducerAccessMode.WaitForExclusive);
        try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                .subscribe()) {
            Thread.sleep(500); // nothing observable happens while it waits: give the broker a chance to err
            assertFalse(waiting.isDone(), "the waiting producer was admitted beside the owner");
            owner.send("first");
            owner.close();
            try (Producer<String> next = waiting.get(30, TimeUnit.SECONDS)) {
                next.send("second");
            }
            assertEquals("first", receive(consumer).getValue());
            assertEquals("second", receive(consumer).getValue());
        }
    }

    @Test
    void exclusiveWithFencingTakesOverAndFencesTheOldProducer() throws Exception {
        String topic = Env.topic("access-fencing");
        Producer<String> old = producer(topic, ProducerAccessMode.Exclusive);
        old.send("old");
        try (Producer<String> fencer = producer(topic, ProducerAccessMode.ExclusiveWithFencing)) {
            fencer.send("new");
            Throwable failure = null;
            long deadline = System.currentTimeMillis() + 20_000;
            while (failure == null && System.currentTimeMillis() < deadline) {
                try {
                    old.sendAsync("late").get(5, TimeUnit.SECONDS);
                    Thread.sleep(100);
                } catch (ExecutionException e) {
                    failure = e.getCause();
                }
            }
            assertInstanceOf(PulsarClientException.ProducerFencedException.class, failure);
            assertTrue(fencer.isConnected());
        } finally {
            old.closeAsync();
        }
    }
}
