package dev.magnetar.javaclient;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertNotNull;

/** One client and one admin client per test class, closed after it; no test may hang. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(value = 180, unit = TimeUnit.SECONDS)
abstract class ClientTestBase {
    /** How long a test waits for a message that should arrive. */
    static final int RECEIVE_MS = 10_000;

    PulsarClient client;
    PulsarAdmin admin;

    @BeforeAll
    void open() throws Exception {
        client = Env.client();
        admin = Env.admin();
    }

    @AfterAll
    void close() throws Exception {
        if (client != null) {
            client.close();
        }
        if (admin != null) {
            admin.close();
        }
    }

    /** The next message, failing the test if none arrives within {@link #RECEIVE_MS}. */
    static <T> Message<T> receive(Consumer<T> consumer) throws Exception {
        Message<T> msg = consumer.receive(RECEIVE_MS, TimeUnit.MILLISECONDS);
        assertNotNull(msg, "no message within " + RECEIVE_MS + " ms on " + consumer.getTopic());
        return msg;
    }
}
