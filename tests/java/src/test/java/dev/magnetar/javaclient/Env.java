package dev.magnetar.javaclient;

import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;

/**
 * Where the standalone under test listens and which credentials it accepts, from the
 * {@code MAGNETAR_*} environment variables that scripts/java-client-tests sets (a system property
 * of the same name in lower case with dots, e.g. {@code magnetar.service.url}, wins). Every
 * client and admin client made here authenticates as the super user.
 */
final class Env {
    private Env() {}

    static String get(String name) {
        String prop = System.getProperty(name.toLowerCase().replace('_', '.'));
        String value = prop != null ? prop : System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run the suite with scripts/java-client-tests");
        }
        return value;
    }

    static String serviceUrl() { return get("MAGNETAR_SERVICE_URL"); }
    static String httpUrl() { return get("MAGNETAR_HTTP_URL"); }
    static String serviceUrlTls() { return get("MAGNETAR_SERVICE_URL_TLS"); }
    static String httpUrlTls() { return get("MAGNETAR_HTTP_URL_TLS"); }
    static String trustCerts() { return get("MAGNETAR_TLS_TRUST_CERTS"); }
    static String adminToken() { return get("MAGNETAR_ADMIN_TOKEN"); }
    static String userToken() { return get("MAGNETAR_USER_TOKEN"); }
    static String userRole() { return get("MAGNETAR_USER_ROLE"); }
    static String forgedToken() { return get("MAGNETAR_FORGED_TOKEN"); }

    /** A client of the plain port, authenticated as the super user. */
    static PulsarClient client() throws PulsarClientException {
        return PulsarClient.builder()
                .serviceUrl(serviceUrl())
                .authentication(AuthenticationFactory.token(adminToken()))
                .operationTimeout(30, TimeUnit.SECONDS)
                .build();
    }

    /** An admin client of the plain REST port, authenticated as the super user. */
    static PulsarAdmin admin() throws PulsarClientException {
        return PulsarAdmin.builder()
                .serviceHttpUrl(httpUrl())
                .authentication(AuthenticationFactory.token(adminToken()))
                .requestTimeout(30, TimeUnit.SECONDS)
                .build();
    }

    /** A topic name no other test uses: {@code persistent://public/default/<prefix>-<random>}. */
    static String topic(String prefix) {
        return "persistent://public/default/" + unique(prefix);
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }
}
