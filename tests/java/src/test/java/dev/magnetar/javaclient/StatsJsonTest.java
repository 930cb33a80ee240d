package dev.magnetar.javaclient;

import java.io.IOException;
import java.math.BigDecimal;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.TreeSet;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.PartitionedTopicInternalStats;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.stats.PartitionedTopicStatsImpl;
import org.apache.pulsar.common.policies.data.stats.TopicStatsImpl;
import org.apache.pulsar.common.util.ObjectMapperFactory;
import org.apache.pulsar.shade.com.fasterxml.jackson.core.JsonParser;
import org.apache.pulsar.shade.com.fasterxml.jackson.databind.DeserializationContext;
import org.apache.pulsar.shade.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.pulsar.shade.com.fasterxml.jackson.databind.JsonDeserializer;
import org.apache.pulsar.shade.com.fasterxml.jackson.databind.JsonNode;
import org.apache.pulsar.shade.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.pulsar.shade.com.fasterxml.jackson.databind.deser.DeserializationProblemHandler;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Magnetar's stats JSON read field for field into the admin client's own classes. Each document
 * is fetched raw over REST and (1) parsed by Pulsar's object mapper with unknown properties
 * refused, so Magnetar sends no field Pulsar lacks and every value has Pulsar's type, then (2)
 * written back by the same mapper, as Pulsar's broker writes it, and compared with what Magnetar
 * sent: a field Pulsar's class writes that Magnetar left out, a value that changed on the way
 * (a number sent as a string, an unknown enum constant) or a null Pulsar would omit is a
 * difference. The topic has what makes stats non-trivial: a connected producer, batches,
 * acknowledgement holes, unacknowledged messages, and subscriptions of several types.
 */
class StatsJsonTest extends ClientTestBase {
    /**
     * Fields the 4.2 classes have that Pulsar 4.0 (the LTS line, whose stats JSON Magnetar writes)
     * does not: TopicStatsImpl's topicCreationTimeStamp and lastPublishTimeStamp,
     * SubscriptionStatsImpl's msgExpired, ConsumerStatsImpl's firstMessagesSentTimestamp and
     * firstConsumedFlowTimestamp. Their absence is not a difference; any other missing field is.
     */
    static final Set<String> ADDED_AFTER_4_0 = Set.of("topicCreationTimeStamp", "lastPublishTimeStamp", "msgExpired",
            "firstMessagesSentTimestamp", "firstConsumedFlowTimestamp");
    private final ObjectMapper strict = ObjectMapperFactory.create()
            .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, true)
            .configure(DeserializationFeature.READ_UNKNOWN_ENUM_VALUES_AS_NULL, false)
            .addHandler(new DeserializationProblemHandler() {
                @Override
                public boolean handleUnknownProperty(DeserializationContext ctxt, JsonParser p,
                        JsonDeserializer<?> deserializer, Object bean, String name) throws IOException {
                    // a property Pulsar's class writes from a getter but cannot read back (e.g.
                    // ConsumerStatsImpl's lastAckedTime): compared after the round trip instead
                    if (bean != null && writtenOnly(bean.getClass()).contains(name)) {
                        p.skipChildren();
                        return true;
                    }
                    return false;
                }
            });
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    private final List<AutoCloseable> open = new ArrayList<>();
    private String topic;
    private String partitioned;

    @BeforeAll
    void busyTopics() throws Exception {
        topic = Env.topic("stats-json");
        partitioned = Env.topic("stats-json-parted");
        admin.topics().createPartitionedTopic(partitioned, 2);
        for (String t : List.of(topic, partitioned)) {
            admin.topics().createSubscription(t, "idle-shared", MessageId.earliest);
            Consumer<String> exclusive = client.newConsumer(Schema.STRING).topic(t).subscriptionName("holes")
                    .consumerName("c-holes").subscribe();
            Consumer<String> keyShared = client.newConsumer(Schema.STRING).topic(t).subscriptionName("keys")
                    .subscriptionType(SubscriptionType.Key_Shared).consumerName("c-keys").subscribe();
            Producer<String> batched = client.newProducer(Schema.STRING).topic(t).producerName("batched-" + t.hashCode())
                    .batchingMaxMessages(5).create();
            // unbatched messages, so that single acknowledgements leave holes (a batch is acknowledged whole)
            Producer<String> single = client.newProducer(Schema.STRING).topic(t).producerName("single-" + t.hashCode())
                    .enableBatching(false).create();
            open.addAll(List.of(exclusive, keyShared, batched, single));
            for (int i = 0; i < 20; i++) {
                batched.newMessage().key("k" + (i % 4)).value("m" + i).sendAsync();
            }
            batched.flush();
            for (int i = 20; i < 40; i++) {
                single.newMessage().key("k" + (i % 4)).value("m" + i).send();
            }
            for (int i = 0; i < 40; i++) {
                Message<String> m = receive(exclusive);
                if (i % 3 == 0) {
                    exclusive.acknowledge(m); // holes in the acknowledged ranges
                }
            }
            for (int i = 0; i < 10; i++) {
                keyShared.acknowledge(receive(keyShared));
            }
        }
    }

    @AfterAll
    void closeTopics() throws Exception {
        for (AutoCloseable c : open) {
            c.close();
        }
    }

    private final Map<Class<?>, Set<String>> writtenOnly = new ConcurrentHashMap<>();

    /** The properties Pulsar's mapper writes for {@code cls} but has no setter or field to read into. */
    private Set<String> writtenOnly(Class<?> cls) {
        return writtenOnly.computeIfAbsent(cls, c -> {
            Set<String> out = new HashSet<>();
            var description = strict.getSerializationConfig().introspect(strict.constructType(c));
            for (var prop : description.findProperties()) {
                if (prop.couldSerialize() && !prop.couldDeserialize()) {
                    out.add(prop.getName());
                }
            }
            return out;
        });
    }

    private String get(String path) throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create(Env.httpUrl() + path))
                .header("Authorization", "Bearer " + Env.adminToken()).timeout(Duration.ofSeconds(30)).GET().build();
        HttpResponse<String> resp = http.send(req, HttpResponse.BodyHandlers.ofString());
        assertEquals(200, resp.statusCode(), path + ": " + resp.body());
        return resp.body();
    }

    private static String rest(String topicName) {
        return "/admin/v2/" + topicName.replace("://", "/");
    }

    /** Parse strictly into {@code cls}, write back as Pulsar does, and list every difference. */
    private <T> T check(String path, Class<T> cls) throws Exception {
        String raw = get(path);
        T parsed = strict.readValue(raw, cls);
        JsonNode sent = strict.readTree(raw);
        JsonNode pulsar = strict.valueToTree(parsed);
        List<String> differences = new ArrayList<>();
        diff("$", sent, pulsar, differences);
        assertTrue(differences.isEmpty(), cls.getSimpleName() + " from " + path + " differs from what Pulsar writes:\n  "
                + String.join("\n  ", differences) + "\nsent: " + raw);
        return parsed;
    }

    private static void diff(String at, JsonNode sent, JsonNode pulsar, List<String> out) {
        if (sent.isObject() && pulsar.isObject()) {
            TreeSet<String> names = new TreeSet<>();
            sent.fieldNames().forEachRemaining(names::add);
            pulsar.fieldNames().forEachRemaining(names::add);
            for (String name : names) {
                JsonNode s = sent.get(name);
                JsonNode p = pulsar.get(name);
                if (s == null && ADDED_AFTER_4_0.contains(name)) {
                    continue;
                } else if (s == null) {
                    out.add(at + "." + name + ": missing (Pulsar writes " + p + ")");
                } else if (p == null) {
                    out.add(at + "." + name + ": sent " + s + ", which Pulsar would not write");
                } else {
                    diff(at + "." + name, s, p, out);
                }
            }
        } else if (sent.isArray() && pulsar.isArray()) {
            if (sent.size() != pulsar.size()) {
                out.add(at + ": " + sent.size() + " items sent, " + pulsar.size() + " read");
                return;
            }
            Iterator<JsonNode> a = sent.elements();
            Iterator<JsonNode> b = pulsar.elements();
            for (int i = 0; a.hasNext(); i++) {
                diff(at + "[" + i + "]", a.next(), b.next(), out);
            }
        } else if (sent.isNumber() && pulsar.isNumber()) {
            if (new BigDecimal(sent.asText()).compareTo(new BigDecimal(pulsar.asText())) != 0) {
                out.add(at + ": sent " + sent + ", read as " + pulsar);
            }
        } else if (!sent.equals(pulsar)) {
            out.add(at + ": sent " + sent + " (" + sent.getNodeType() + "), read as " + pulsar + " ("
                    + pulsar.getNodeType() + ")");
        }
    }

    @Test
    void topicSubscriptionConsumerAndPublisherStats() throws Exception {
        TopicStatsImpl stats = check(rest(topic) + "/stats", TopicStatsImpl.class);
        assertEquals(40, stats.msgInCounter);
        assertEquals(2, stats.getPublishers().size());
        assertEquals(3, stats.subscriptions.size());
        assertEquals(1, stats.subscriptions.get("holes").consumers.size());
        assertTrue(stats.subscriptions.get("holes").nonContiguousDeletedMessagesRanges > 0,
                "no acknowledgement holes counted");
        assertEquals("Key_Shared", stats.subscriptions.get("keys").type);
    }

    @Test
    void statsWithEveryOptionalPart() throws Exception {
        check(rest(topic) + "/stats?getPreciseBacklog=true&subscriptionBacklogSize=true&getEarliestTimeInBacklog=true",
                TopicStatsImpl.class);
    }

    @Test
    void partitionedStats() throws Exception {
        PartitionedTopicStatsImpl stats = check(rest(partitioned) + "/partitioned-stats?perPartition=true",
                PartitionedTopicStatsImpl.class);
        assertEquals(2, stats.partitions.size());
        assertEquals(40, stats.msgInCounter);
        check(rest(partitioned) + "/partitioned-stats?perPartition=false", PartitionedTopicStatsImpl.class);
    }

    @Test
    void internalStats() throws Exception {
        PersistentTopicInternalStats stats = check(rest(topic) + "/internalStats", PersistentTopicInternalStats.class);
        assertTrue(stats.cursors.containsKey("holes"));
        check(rest(topic) + "/internalStats?metadata=true", PersistentTopicInternalStats.class);
    }

    @Test
    void partitionedInternalStats() throws Exception {
        PartitionedTopicInternalStats stats = check(rest(partitioned) + "/partitioned-internalStats",
                PartitionedTopicInternalStats.class);
        assertEquals(2, stats.partitions.size());
    }
}
