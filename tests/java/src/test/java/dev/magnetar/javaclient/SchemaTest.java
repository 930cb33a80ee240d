package dev.magnetar.javaclient;

import dev.magnetar.javaclient.proto.SensorProtos.Reading;
import java.util.List;
import java.util.Objects;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Avro, JSON, native Protobuf, KeyValue and AUTO_CONSUME schemas, registered through the client. */
class SchemaTest extends ClientTestBase {

    /** A record as an application declares it (Avro reflection and Jackson both read public fields). */
    public static class User {
        public String name;
        public int age;

        public User() {}

        User(String name, int age) {
            this.name = name;
            this.age = age;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof User u && Objects.equals(name, u.name) && age == u.age;
        }

        @Override
        public int hashCode() {
            return Objects.hash(name, age);
        }

        @Override
        public String toString() {
            return name + "/" + age;
        }
    }

    /** The same record name with a field of another type: incompatible under every strategy but ALWAYS_COMPATIBLE. */
    public static class UserV2 {
        public String name;
        public String age;

        public UserV2() {}
    }

    /** A second record, for the value side of KeyValue schemas. */
    public static class Order {
        public long id;
        public double amount;

        public Order() {}

        Order(long id, double amount) {
            this.id = id;
            this.amount = amount;
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Order x && id == x.id && amount == x.amount;
        }

        @Override
        public int hashCode() {
            return Objects.hash(id, amount);
        }
    }

    private <T> void roundTrip(Schema<T> schema, String topic, List<T> values) throws Exception {
        try (Consumer<T> consumer = client.newConsumer(schema).topic(topic).subscriptionName("sub")
                     .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
             Producer<T> producer = client.newProducer(schema).topic(topic).create()) {
            for (T v : values) {
                producer.send(v);
            }
            for (T v : values) {
                Message<T> m = receive(consumer);
                assertEquals(v, m.getValue());
                consumer.acknowledge(m);
            }
        }
    }

    @Test
    void avro() throws Exception {
        String topic = Env.topic("schema-avro");
        roundTrip(Schema.AVRO(User.class), topic, List.of(new User("ada", 36), new User("alan", 41)));
        SchemaInfo info = admin.schemas().getSchemaInfo(topic);
        assertEquals(SchemaType.AVRO, info.getType());
        assertTrue(info.getSchemaDefinition().contains("\"name\""), info.getSchemaDefinition());
    }

    @Test
    void json() throws Exception {
        String topic = Env.topic("schema-json");
        roundTrip(Schema.JSON(User.class), topic, List.of(new User("grace", 85), new User("edsger", 72)));
        assertEquals(SchemaType.JSON, admin.schemas().getSchemaInfo(topic).getType());
    }

    @Test
    void protobufNative() throws Exception {
        String topic = Env.topic("schema-protobuf-native");
        Reading r1 = Reading.newBuilder().setSensor("t1").setValue(21.5).setUnit(Reading.Unit.CELSIUS)
                .setLocation(Reading.Location.newBuilder().setSite("lab").setFloor(2)).addTags("a").build();
        Reading r2 = Reading.newBuilder().setSensor("t2").setValue(300).setUnit(Reading.Unit.KELVIN).build();
        roundTrip(Schema.PROTOBUF_NATIVE(Reading.class), topic, List.of(r1, r2));
        SchemaInfo info = admin.schemas().getSchemaInfo(topic);
        assertEquals(SchemaType.PROTOBUF_NATIVE, info.getType());
        assertTrue(info.getSchemaDefinition().contains("magnetar.javaclient.Reading"), info.getSchemaDefinition());
    }

    @ParameterizedTest
    @EnumSource(KeyValueEncodingType.class)
    void keyValue(KeyValueEncodingType encoding) throws Exception {
        String topic = Env.topic("schema-kv-" + encoding.name().toLowerCase());
        Schema<KeyValue<User, Order>> schema = Schema.KeyValue(Schema.JSON(User.class), Schema.AVRO(Order.class),
                encoding);
        try (Consumer<KeyValue<User, Order>> consumer = client.newConsumer(schema).topic(topic)
                     .subscriptionName("sub").subscribe();
             Producer<KeyValue<User, Order>> producer = client.newProducer(schema).topic(topic).create()) {
            for (int i = 0; i < 3; i++) {
                producer.send(new KeyValue<>(new User("u" + i, i), new Order(i, i * 1.5)));
            }
            for (int i = 0; i < 3; i++) {
                Message<KeyValue<User, Order>> m = receive(consumer);
                assertEquals(new User("u" + i, i), m.getValue().getKey());
                assertEquals(new Order(i, i * 1.5), m.getValue().getValue());
                consumer.acknowledge(m);
            }
        }
        assertEquals(SchemaType.KEY_VALUE, admin.schemas().getSchemaInfo(topic).getType());
    }

    @Test
    void autoConsumeReadsEachSchemaAsGenericRecords() throws Exception {
        String avroTopic = Env.topic("schema-auto-avro");
        String jsonTopic = Env.topic("schema-auto-json");
        for (String topic : List.of(avroTopic, jsonTopic)) {
            Schema<User> schema = topic.equals(avroTopic) ? Schema.AVRO(User.class) : Schema.JSON(User.class);
            try (Consumer<GenericRecord> consumer = client.newConsumer(Schema.AUTO_CONSUME()).topic(topic)
                         .subscriptionName("auto").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                         .subscribe();
                 Producer<User> producer = client.newProducer(schema).topic(topic).create()) {
                producer.send(new User("barbara", 70));
                Message<GenericRecord> m = receive(consumer);
                GenericRecord rec = m.getValue();
                assertEquals(schema.getSchemaInfo().getType(), rec.getSchemaType());
                assertEquals("barbara", rec.getField("name").toString());
                assertEquals(70, ((Number) rec.getField("age")).intValue());
                consumer.acknowledge(m);
            }
        }
    }

    @Test
    void autoProduceBytesIsCheckedAgainstTheTopicSchema() throws Exception {
        String topic = Env.topic("schema-auto-produce");
        Schema<User> avro = Schema.AVRO(User.class);
        try (Consumer<User> consumer = client.newConsumer(avro).topic(topic).subscriptionName("sub").subscribe();
             Producer<byte[]> producer = client.newProducer(Schema.AUTO_PRODUCE_BYTES()).topic(topic).create()) {
            producer.send(avro.encode(new User("linus", 55)));
            assertEquals(new User("linus", 55), receive(consumer).getValue());
        }
    }

    @Test
    void incompatibleSchemaIsRefused() throws Exception {
        String topic = Env.topic("schema-incompatible");
        try (Producer<User> p = client.newProducer(Schema.AVRO(User.class)).topic(topic).create()) {
            p.send(new User("ken", 80));
        }
        assertThrows(PulsarClientException.IncompatibleSchemaException.class,
                () -> client.newProducer(Schema.AVRO(UserV2.class)).topic(topic).create());
    }
}
