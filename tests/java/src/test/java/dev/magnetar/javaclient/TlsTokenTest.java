package dev.magnetar.javaclient;

import java.util.EnumSet;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Authentication;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.policies.data.AuthAction;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * pulsar+ssl:// and https:// with token authentication and authorization: the super user, a
 * forged token, no token, and a role that may act only once granted.
 */
class TlsTokenTest extends ClientTestBase {

    private static PulsarClient tlsClient(Authentication auth) throws PulsarClientException {
        var builder = PulsarClient.builder().serviceUrl(Env.serviceUrlTls()).tlsTrustCertsFilePath(Env.trustCerts())
                .enableTlsHostnameVerification(true).operationTimeout(10, TimeUnit.SECONDS);
        if (auth != null) {
            builder.authentication(auth);
        }
        return builder.build();
    }

    private static PulsarAdmin tlsAdmin(String token) throws PulsarClientException {
        return PulsarAdmin.builder().serviceHttpUrl(Env.httpUrlTls()).tlsTrustCertsFilePath(Env.trustCerts())
                .enableTlsHostnameVerification(true).authentication(AuthenticationFactory.token(token))
                .requestTimeout(10, TimeUnit.SECONDS).build();
    }

    private static void produceAndConsume(PulsarClient c, String topic) throws Exception {
        try (Consumer<String> consumer = c.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub").subscribe();
             Producer<String> producer = c.newProducer(Schema.STRING).topic(topic).create()) {
            producer.send("over tls");
            assertEquals("over tls", receive(consumer).getValue());
        }
    }

    @Test
    void superUserOverTls() throws Exception {
        try (PulsarClient c = tlsClient(AuthenticationFactory.token(Env.adminToken()))) {
            produceAndConsume(c, Env.topic("tls-admin"));
        }
        try (PulsarAdmin a = tlsAdmin(Env.adminToken())) {
            assertTrue(a.tenants().getTenants().contains("public"));
            assertTrue(a.clusters().getClusters().contains("standalone"));
        }
    }

    @Test
    void forgedOrMissingCredentialsAreRefused() throws Exception {
        String topic = Env.topic("tls-forged");
        try (PulsarClient c = tlsClient(AuthenticationFactory.token(Env.forgedToken()))) {
            assertThrows(PulsarClientException.AuthenticationException.class,
                    () -> c.newProducer().topic(topic).create());
        }
        try (PulsarClient c = tlsClient(null)) {
            assertThrows(PulsarClientException.AuthenticationException.class,
                    () -> c.newProducer().topic(topic).create());
        }
        try (PulsarAdmin a = tlsAdmin(Env.forgedToken())) {
            PulsarAdminException e = assertThrows(PulsarAdminException.class, () -> a.tenants().getTenants());
            assertEquals(401, e.getStatusCode());
        }
    }

    @Test
    void aRoleMayProduceAndConsumeOnlyOnceGranted() throws Exception {
        String ns = "public/" + Env.unique("tls-grants");
        admin.namespaces().createNamespace(ns);
        String topic = "persistent://" + ns + "/t";
        try (PulsarClient c = tlsClient(AuthenticationFactory.token(Env.userToken()))) {
            assertThrows(PulsarClientException.AuthorizationException.class,
                    () -> c.newProducer().topic(topic).create());
            try (PulsarAdmin a = tlsAdmin(Env.userToken())) {
                PulsarAdminException e = assertThrows(PulsarAdminException.class,
                        () -> a.namespaces().getPolicies(ns));
                assertEquals(403, e.getStatusCode());
            }
            admin.namespaces().grantPermissionOnNamespace(ns, Env.userRole(),
                    EnumSet.of(AuthAction.produce, AuthAction.consume));
            assertEquals(EnumSet.of(AuthAction.produce, AuthAction.consume),
                    admin.namespaces().getPermissions(ns).get(Env.userRole()));
            produceAndConsume(c, topic);
            admin.namespaces().revokePermissionsOnNamespace(ns, Env.userRole());
            assertThrows(PulsarClientException.AuthorizationException.class,
                    () -> c.newProducer().topic(topic + "-2").create());
        }
    }
}
