package dev.magnetar.javaclient;

import java.nio.charset.StandardCharsets;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.policies.data.AuthAction;
import org.apache.pulsar.common.policies.data.AutoTopicCreationOverride;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.PartitionedTopicStats;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.Policies;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.policies.data.SubscriptionStats;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.apache.pulsar.common.protocol.schema.IsCompatibilityResponse;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaInfoWithVersion;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What operators do most through the admin client: tenants, namespaces and policies, topics, subscriptions, schemas, stats. */
class AdminTest extends ClientTestBase {

    private List<MessageId> produce(String topic, int n) throws Exception {
        List<MessageId> ids = new java.util.ArrayList<>();
        try (Producer<String> p = client.newProducer(Schema.STRING).topic(topic).enableBatching(false).create()) {
            for (int i = 0; i < n; i++) {
                ids.add(p.send("m" + i));
            }
        }
        return ids;
    }

    @Test
    void clustersAndTenants() throws Exception {
        assertTrue(admin.clusters().getClusters().contains("standalone"));
        assertNotNull(admin.clusters().getCluster("standalone").getServiceUrl());
        String tenant = Env.unique("tenant");
        admin.tenants().createTenant(tenant, TenantInfo.builder().adminRoles(Set.of("ops"))
                .allowedClusters(Set.of("standalone")).build());
        assertTrue(admin.tenants().getTenants().contains(tenant));
        TenantInfo info = admin.tenants().getTenantInfo(tenant);
        assertEquals(Set.of("ops"), info.getAdminRoles());
        assertEquals(Set.of("standalone"), info.getAllowedClusters());
        admin.tenants().updateTenant(tenant, TenantInfo.builder().adminRoles(Set.of("ops", "sre"))
                .allowedClusters(Set.of("standalone")).build());
        assertEquals(Set.of("ops", "sre"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
        PulsarAdminException dup = assertThrows(PulsarAdminException.ConflictException.class,
                () -> admin.tenants().createTenant(tenant, TenantInfo.builder()
                        .allowedClusters(Set.of("standalone")).build()));
        assertEquals(409, dup.getStatusCode());
        admin.namespaces().createNamespace(tenant + "/ns");
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().deleteTenant(tenant));
        admin.namespaces().deleteNamespace(tenant + "/ns");
        admin.tenants().deleteTenant(tenant);
        assertFalse(admin.tenants().getTenants().contains(tenant));
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.tenants().getTenantInfo(tenant));
    }

    @Test
    void namespacesAndTheirPolicies() throws Exception {
        String ns = "public/" + Env.unique("ns");
        admin.namespaces().createNamespace(ns, 8);
        assertTrue(admin.namespaces().getNamespaces("public").contains(ns));
        assertEquals(8, admin.namespaces().getPolicies(ns).bundles.getNumBundles());

        admin.namespaces().setRetention(ns, new RetentionPolicies(60, 100));
        assertEquals(new RetentionPolicies(60, 100), admin.namespaces().getRetention(ns));
        admin.namespaces().setNamespaceMessageTTL(ns, 3600);
        assertEquals(3600, admin.namespaces().getNamespaceMessageTTL(ns));
        BacklogQuota quota = BacklogQuota.builder().limitSize(10L * 1024 * 1024)
                .retentionPolicy(BacklogQuota.RetentionPolicy.producer_exception).build();
        admin.namespaces().setBacklogQuota(ns, quota);
        Map<BacklogQuota.BacklogQuotaType, BacklogQuota> quotas = admin.namespaces().getBacklogQuotaMap(ns);
        assertEquals(10L * 1024 * 1024, quotas.get(BacklogQuota.BacklogQuotaType.destination_storage).getLimitSize());
        assertEquals(BacklogQuota.RetentionPolicy.producer_exception,
                quotas.get(BacklogQuota.BacklogQuotaType.destination_storage).getPolicy());
        admin.namespaces().setDeduplicationStatus(ns, true);
        assertEquals(true, admin.namespaces().getDeduplicationStatus(ns));
        admin.namespaces().setSchemaCompatibilityStrategy(ns, SchemaCompatibilityStrategy.BACKWARD);
        assertEquals(SchemaCompatibilityStrategy.BACKWARD, admin.namespaces().getSchemaCompatibilityStrategy(ns));
        admin.namespaces().setMaxProducersPerTopic(ns, 7);
        assertEquals(7, admin.namespaces().getMaxProducersPerTopic(ns));
        admin.namespaces().setMaxConsumersPerSubscription(ns, 3);
        assertEquals(3, admin.namespaces().getMaxConsumersPerSubscription(ns));
        admin.namespaces().setCompactionThreshold(ns, 1024 * 1024);
        assertEquals(1024 * 1024, admin.namespaces().getCompactionThreshold(ns));
        admin.namespaces().setAutoTopicCreation(ns, AutoTopicCreationOverride.builder().allowAutoTopicCreation(true)
                .topicType("partitioned").defaultNumPartitions(3).build());
        assertEquals(3, admin.namespaces().getAutoTopicCreation(ns).getDefaultNumPartitions());
        admin.namespaces().grantPermissionOnNamespace(ns, "reader-role", EnumSet.of(AuthAction.consume));
        assertEquals(EnumSet.of(AuthAction.consume), admin.namespaces().getPermissions(ns).get("reader-role"));

        // the whole Policies document, as the admin client deserializes it
        Policies policies = admin.namespaces().getPolicies(ns);
        assertEquals(3600, policies.message_ttl_in_seconds);
        assertEquals(60, policies.retention_policies.getRetentionTimeInMinutes());
        assertEquals(true, policies.deduplicationEnabled);
        assertEquals(7, policies.max_producers_per_topic);
        assertEquals(SchemaCompatibilityStrategy.BACKWARD, policies.schema_compatibility_strategy);
        assertTrue(policies.auth_policies.getNamespaceAuthentication().containsKey("reader-role"));

        admin.namespaces().removeNamespaceMessageTTL(ns);
        assertEquals(null, admin.namespaces().getNamespaceMessageTTL(ns));
        admin.namespaces().removeBacklogQuota(ns);
        assertTrue(admin.namespaces().getBacklogQuotaMap(ns).isEmpty());
        admin.namespaces().revokePermissionsOnNamespace(ns, "reader-role");
        assertFalse(admin.namespaces().getPermissions(ns).containsKey("reader-role"));
        admin.namespaces().deleteNamespace(ns);
        assertFalse(admin.namespaces().getNamespaces("public").contains(ns));
    }

    @Test
    void subscriptionExpirationPolicy() throws Exception {
        String ns = "public/" + Env.unique("sub-expiry");
        admin.namespaces().createNamespace(ns);
        admin.namespaces().setSubscriptionExpirationTime(ns, 120);
        assertEquals(120, admin.namespaces().getSubscriptionExpirationTime(ns));
        admin.namespaces().removeSubscriptionExpirationTime(ns);
        assertEquals(null, admin.namespaces().getSubscriptionExpirationTime(ns));
    }

    @Test
    void topicsAndPartitionedTopics() throws Exception {
        String ns = "public/" + Env.unique("topics");
        admin.namespaces().createNamespace(ns);
        String plain = "persistent://" + ns + "/plain";
        String parted = "persistent://" + ns + "/parted";
        admin.topics().createNonPartitionedTopic(plain);
        admin.topics().createPartitionedTopic(parted, 3);
        assertThrows(PulsarAdminException.ConflictException.class, () -> admin.topics().createNonPartitionedTopic(plain));
        assertEquals(List.of(parted), admin.topics().getPartitionedTopicList(ns));
        List<String> all = admin.topics().getList(ns);
        assertTrue(all.contains(plain), all.toString());
        assertTrue(all.contains(parted + "-partition-0"), all.toString());
        assertEquals(3, admin.topics().getPartitionedTopicMetadata(parted).partitions);
        assertEquals(0, admin.topics().getPartitionedTopicMetadata(plain).partitions);
        admin.topics().updatePartitionedTopic(parted, 5);
        assertEquals(5, admin.topics().getPartitionedTopicMetadata(parted).partitions);
        List<MessageId> ids = produce(plain, 3);
        assertEquals(ids.get(2), admin.topics().getLastMessageId(plain));
        admin.topics().unload(plain);
        assertEquals(ids.get(2), admin.topics().getLastMessageId(plain));
        MessageId last = admin.topics().terminateTopic(plain);
        assertEquals(ids.get(2), last);
        assertThrows(Exception.class, () -> produce(plain, 1), "a terminated topic accepted a message");
        admin.topics().delete(plain);
        admin.topics().deletePartitionedTopic(parted);
        assertFalse(admin.topics().getList(ns).contains(plain));
        assertTrue(admin.topics().getPartitionedTopicList(ns).isEmpty());
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().getStats(plain));
    }

    @Test
    void subscriptionsAndTheirCursors() throws Exception {
        String topic = Env.topic("admin-subs");
        admin.topics().createSubscription(topic, "ops", MessageId.earliest);
        assertEquals(List.of("ops"), admin.topics().getSubscriptions(topic));
        List<MessageId> ids = produce(topic, 10);
        assertEquals(10, admin.topics().getStats(topic).getSubscriptions().get("ops").getMsgBacklog());

        List<Message<byte[]>> peeked = admin.topics().peekMessages(topic, "ops", 2);
        assertEquals(List.of("m0", "m1"), peeked.stream().map(m -> new String(m.getData(), StandardCharsets.UTF_8)).toList());
        Message<byte[]> byId = admin.topics().getMessageById(topic, ledger(ids.get(4)), entry(ids.get(4)));
        assertEquals("m4", new String(byId.getData(), StandardCharsets.UTF_8));
        assertEquals("m0", new String(admin.topics().examineMessage(topic, "earliest", 1).getData(), StandardCharsets.UTF_8));
        assertEquals("m9", new String(admin.topics().examineMessage(topic, "latest", 1).getData(), StandardCharsets.UTF_8));

        admin.topics().skipMessages(topic, "ops", 3);
        assertEquals(7, backlog(topic, "ops"));
        admin.topics().resetCursor(topic, "ops", ids.get(1));
        assertEquals(9, backlog(topic, "ops"));
        admin.topics().skipAllMessages(topic, "ops");
        assertEquals(0, backlog(topic, "ops"));
        admin.topics().resetCursor(topic, "ops", 0L);
        assertEquals(10, backlog(topic, "ops"));
        admin.topics().expireMessages(topic, "ops", 0);
        long deadline = System.currentTimeMillis() + 10_000;
        while (backlog(topic, "ops") != 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        assertEquals(0, backlog(topic, "ops"));
        admin.topics().createSubscription(topic, "latest", MessageId.latest);
        assertEquals(0, backlog(topic, "latest"));
        admin.topics().deleteSubscription(topic, "ops");
        assertEquals(List.of("latest"), admin.topics().getSubscriptions(topic));
    }

    private long backlog(String topic, String sub) throws PulsarAdminException {
        SubscriptionStats s = admin.topics().getStats(topic).getSubscriptions().get(sub);
        return s.getMsgBacklog();
    }

    private static long ledger(MessageId id) {
        return ((org.apache.pulsar.client.api.MessageIdAdv) id).getLedgerId();
    }

    private static long entry(MessageId id) {
        return ((org.apache.pulsar.client.api.MessageIdAdv) id).getEntryId();
    }

    @Test
    void schemas() throws Exception {
        String topic = Env.topic("admin-schema");
        String v1 = "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"}]}";
        String v2 = "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"int\"},"
                + "{\"name\":\"b\",\"type\":\"string\",\"default\":\"\"}]}";
        String bad = "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"string\"}]}";
        admin.schemas().createSchema(topic, SchemaInfo.builder().name("r").type(SchemaType.AVRO)
                .schema(v1.getBytes(StandardCharsets.UTF_8)).properties(Map.of("owner", "ops")).build());
        SchemaInfoWithVersion got = admin.schemas().getSchemaInfoWithVersion(topic);
        assertEquals(0, got.getVersion());
        assertEquals(SchemaType.AVRO, got.getSchemaInfo().getType());
        assertEquals("ops", got.getSchemaInfo().getProperties().get("owner"));
        SchemaInfo second = SchemaInfo.builder().name("r").type(SchemaType.AVRO)
                .schema(v2.getBytes(StandardCharsets.UTF_8)).build();
        IsCompatibilityResponse ok = admin.schemas().testCompatibility(topic, second);
        assertTrue(ok.isCompatibility());
        IsCompatibilityResponse no = admin.schemas().testCompatibility(topic, SchemaInfo.builder().name("r")
                .type(SchemaType.AVRO).schema(bad.getBytes(StandardCharsets.UTF_8)).build());
        assertFalse(no.isCompatibility());
        admin.schemas().createSchema(topic, second);
        assertEquals(1, admin.schemas().getSchemaInfoWithVersion(topic).getVersion());
        assertEquals(2, admin.schemas().getAllSchemas(topic).size());
        assertEquals(1L, admin.schemas().getVersionBySchema(topic, second));
        assertTrue(new String(admin.schemas().getSchemaInfo(topic, 0).getSchema(), StandardCharsets.UTF_8)
                .contains("\"a\""));
        admin.schemas().deleteSchema(topic);
        assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.schemas().getSchemaInfo(topic));
    }

    @Test
    void statsOfTopicsSubscriptionsConsumersAndPublishers() throws Exception {
        String topic = Env.topic("admin-stats");
        try (var consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
                     .consumerName("the-consumer").subscribe();
             Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).producerName("the-producer")
                     .enableBatching(false).create()) {
            for (int i = 0; i < 10; i++) {
                producer.send("m" + i);
            }
            for (int i = 0; i < 6; i++) {
                consumer.acknowledge(receive(consumer));
            }
            for (int i = 0; i < 4; i++) {
                receive(consumer); // delivered, not acknowledged
            }
            long deadline = System.currentTimeMillis() + 10_000;
            TopicStats stats = admin.topics().getStats(topic);
            while (stats.getSubscriptions().get("sub").getMsgBacklog() != 4 && System.currentTimeMillis() < deadline) {
                Thread.sleep(100); // acknowledgements are grouped by the client
                stats = admin.topics().getStats(topic);
            }
            assertEquals(10, stats.getMsgInCounter());
            assertTrue(stats.getBytesInCounter() >= 20);
            assertEquals(10, stats.getMsgOutCounter());
            assertTrue(stats.getStorageSize() > 0);
            assertEquals(1, stats.getPublishers().size());
            assertEquals("the-producer", stats.getPublishers().get(0).getProducerName());
            SubscriptionStats sub = stats.getSubscriptions().get("sub");
            assertEquals(4, sub.getMsgBacklog());
            assertEquals(4, sub.getUnackedMessages());
            assertEquals("Exclusive", sub.getType());
            assertEquals(1, sub.getConsumers().size());
            assertEquals("the-consumer", sub.getConsumers().get(0).getConsumerName());
            assertEquals(4, sub.getConsumers().get(0).getUnackedMessages());
            assertEquals(10, sub.getConsumers().get(0).getMsgOutCounter());

            PersistentTopicInternalStats internal = admin.topics().getInternalStats(topic);
            assertEquals(10, internal.entriesAddedCounter);
            assertFalse(internal.ledgers.isEmpty());
            assertTrue(internal.cursors.containsKey("sub"));
            assertNotNull(internal.cursors.get("sub").markDeletePosition);
            assertNotNull(internal.cursors.get("sub").readPosition);
        }
        String parted = Env.topic("admin-pstats");
        admin.topics().createPartitionedTopic(parted, 2);
        admin.topics().createSubscription(parted, "sub", MessageId.earliest);
        produce(parted, 6);
        PartitionedTopicStats ps = admin.topics().getPartitionedStats(parted, true);
        assertEquals(6, ps.getMsgInCounter());
        assertEquals(2, ps.getPartitions().size());
        assertEquals(2, ps.getMetadata().partitions);
        assertEquals(6, ps.getSubscriptions().get("sub").getMsgBacklog());
        assertEquals(2, admin.topics().getPartitionedInternalStats(parted).partitions.size());
    }
}
