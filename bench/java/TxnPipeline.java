import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;

/**
 * Consume-transform-produce with the Java client's transactions, for bench/txn_crash.py: every
 * input "in-N" from the input topic becomes "out-N" on the output topic, produced and
 * acknowledged in one transaction. A failure (the broker killed under it) aborts that
 * transaction and asks for the input again; the program runs until it is killed.
 *
 * Usage (single-file source launch, the class path holding pulsar-client):
 * java -cp CP TxnPipeline.java SERVICE_URL INPUT_TOPIC OUTPUT_TOPIC
 */
public class TxnPipeline {
    public static void main(String[] args) throws Exception {
        PulsarClient client = PulsarClient.builder().serviceUrl(args[0]).enableTransaction(true)
                .operationTimeout(10, TimeUnit.SECONDS).build();
        // bytes, as the Python client publishes the inputs (with no schema)
        Consumer<byte[]> in = client.newConsumer(Schema.BYTES).topic(args[1]).subscriptionName("app")
                .subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS)
                .subscribe();
        // the client refuses transactional sends from a producer with a send timeout
        Producer<byte[]> out = client.newProducer(Schema.BYTES).topic(args[2]).sendTimeout(0, TimeUnit.SECONDS)
                .enableBatching(false).create();
        System.out.println("STARTED");
        while (true) {
            Message<byte[]> msg = in.receive(1, TimeUnit.SECONDS);
            if (msg == null) {
                System.out.println("IDLE");
                continue;
            }
            String value = new String(msg.getValue(), StandardCharsets.UTF_8);
            Transaction txn = null;
            try {
                txn = client.newTransaction().withTransactionTimeout(30, TimeUnit.SECONDS).build()
                        .get(15, TimeUnit.SECONDS);
                out.newMessage(txn).value(value.replace("in-", "out-").getBytes(StandardCharsets.UTF_8)).sendAsync().get(15, TimeUnit.SECONDS);
                in.acknowledgeAsync(msg.getMessageId(), txn).get(15, TimeUnit.SECONDS);
                txn.commit().get(15, TimeUnit.SECONDS);
                System.out.println("COMMITTED " + value);
            } catch (Exception e) {
                System.out.println("FAILED " + value + " " + e);
                if (txn != null) {
                    try {
                        txn.abort().get(15, TimeUnit.SECONDS);
                    } catch (Exception ignored) {
                        // the coordinator aborts it at its timeout if this cannot reach it
                    }
                }
                in.negativeAcknowledge(msg);
            }
            System.out.flush();
        }
    }
}
