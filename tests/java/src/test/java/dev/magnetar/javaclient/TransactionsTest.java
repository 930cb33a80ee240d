package dev.magnetar.javaclient;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * Transactions with the Java client's API: consume-transform-produce across two topics, abort,
 * what a non-transactional consumer sees, and a transaction left open past its timeout.
 */
class TransactionsTest extends ClientTestBase {
    private PulsarClient txnClient;

    @BeforeAll
    void openTxnClient() throws Exception {
        txnClient = PulsarClient.builder()
                .serviceUrl(Env.serviceUrl())
                .authentication(AuthenticationFactory.token(Env.adminToken()))
                .operationTimeout(30, TimeUnit.SECONDS)
                .enableTransaction(true)
                .build();
    }

    @AfterAll
    void closeTxnClient() throws Exception {
        if (txnClient != null) {
            txnClient.close();
        }
    }

    private Transaction newTxn(long timeoutSeconds) throws Exception {
        return txnClient.newTransaction().withTransactionTimeout(timeoutSeconds, TimeUnit.SECONDS).build().get();
    }

    private Producer<String> producer(String topic) throws Exception {
        // the client refuses transactional sends from a producer with a send timeout
        return txnClient.newProducer(Schema.STRING).topic(topic).sendTimeout(0, TimeUnit.SECONDS)
                .enableBatching(false).create();
    }

    private Consumer<String> consumer(String topic, String sub) throws Exception {
        return txnClient.newConsumer(Schema.STRING).topic(topic).subscriptionName(sub)
                .subscriptionType(SubscriptionType.Shared).subscribe();
    }

    @Test
    void consumeTransformProduceDeliversEachInputOnceAndAcknowledgesIt() throws Exception {
        String in = Env.topic("txn-in");
        String out = Env.topic("txn-out");
        int n = 20;
        try (Consumer<String> source = consumer(in, "app");
                Consumer<String> sink = consumer(out, "downstream");
                Producer<String> inputs = producer(in);
                Producer<String> outputs = producer(out)) {
            for (int i = 0; i < n; i++) {
                inputs.send("in-" + i);
            }
            for (int i = 0; i < n; i++) {
                Transaction txn = newTxn(60);
                Message<String> msg = receive(source);
                outputs.newMessage(txn).value(msg.getValue().replace("in-", "out-")).send();
                source.acknowledgeAsync(msg.getMessageId(), txn).get();
                txn.commit().get();
            }
            Set<String> got = new HashSet<>();
            for (int i = 0; i < n; i++) {
                Message<String> m = receive(sink);
                got.add(m.getValue());
                sink.acknowledge(m);
            }
            assertEquals(n, got.size());
            assertNull(sink.receive(500, TimeUnit.MILLISECONDS), "an output twice");
            assertEquals(0, admin.topics().getStats(in).getSubscriptions().get("app").getMsgBacklog());
        }
    }

    @Test
    void abortHidesWhatWasProducedAndRedeliversWhatWasAcknowledged() throws Exception {
        String in = Env.topic("txn-abort-in");
        String out = Env.topic("txn-abort-out");
        try (Consumer<String> source = consumer(in, "app");
                Consumer<String> sink = consumer(out, "downstream");
                Producer<String> inputs = producer(in);
                Producer<String> outputs = producer(out)) {
            inputs.send("one");
            Transaction txn = newTxn(60);
            Message<String> msg = receive(source);
            outputs.newMessage(txn).value("never").send();
            source.acknowledgeAsync(msg.getMessageId(), txn).get();
            txn.abort().get();
            assertNull(sink.receive(1000, TimeUnit.MILLISECONDS), "an aborted message was delivered");
            source.redeliverUnacknowledgedMessages();
            assertEquals("one", receive(source).getValue());
        }
    }

    @Test
    void aPlainConsumerSeesOnlyCommittedMessagesInOrder() throws Exception {
        String topic = Env.topic("txn-plain");
        try (Consumer<String> plain = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("plain")
                .subscribe();
                Producer<String> p = producer(topic)) {
            Transaction open = newTxn(60);
            p.newMessage(open).value("t1").send();
            p.send("after-open");
            assertNull(plain.receive(1000, TimeUnit.MILLISECONDS), "a message behind an open transaction");
            Transaction aborted = newTxn(60);
            p.newMessage(aborted).value("aborted").send();
            aborted.abort().get();
            open.commit().get();
            List<String> got = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                got.add(receive(plain).getValue());
            }
            assertEquals(List.of("t1", "after-open"), got);
            assertNull(plain.receive(500, TimeUnit.MILLISECONDS), "an aborted message was delivered");
        }
    }

    @Test
    void aTransactionLeftOpenPastItsTimeoutIsAborted() throws Exception {
        String topic = Env.topic("txn-timeout");
        try (Consumer<String> c = consumer(topic, "s"); Producer<String> p = producer(topic)) {
            Transaction txn = newTxn(2);
            p.newMessage(txn).value("late").send();
            Thread.sleep(4000); // the transaction's own timeout, 2 s, must pass
            assertThrows(ExecutionException.class, () -> txn.commit().get());
            assertNull(c.receive(1000, TimeUnit.MILLISECONDS), "a timed-out transaction's message");
        }
    }
}
