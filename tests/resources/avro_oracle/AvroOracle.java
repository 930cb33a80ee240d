import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.InputStream;
import java.util.Collections;
import org.apache.avro.Schema;
import org.apache.avro.SchemaValidationException;
import org.apache.avro.SchemaValidatorBuilder;

/**
 * Answers schema questions with Avro's own Java implementation, the calls Pulsar's broker makes.
 *
 * Reads a JSON array of questions from standard input and writes a JSON array of answers, one per
 * question, in order:
 *   {"op": "parse", "schema": TEXT}   -> {"result": "ok" | "error"}   (defaults not validated, as
 *                                        Pulsar's schema validator and compatibility check parse)
 *   {"op": "parse_defaults", "schema": TEXT} -> the same with defaults validated (Avro's default
 *                                        parser, as Pulsar's lookup of an existing version)
 *   {"op": "can_read", "reader": TEXT, "writer": TEXT} -> {"result": "ok" | "incompatible" | "error"}
 *                                        whether the reader schema can read data written with the
 *                                        writer schema, as Avro's canRead validation strategy decides
 * A StackOverflowError (Avro's grammar of a record that holds itself outside any union) is an
 * "error" too. "error" answers carry the exception's class and message in "detail".
 */
public final class AvroOracle {
    private AvroOracle() {}

    private static Schema parse(String text, boolean validateDefaults) {
        Schema.Parser parser = new Schema.Parser();
        parser.setValidateDefaults(validateDefaults);
        return parser.parse(text);
    }

    private static void answer(JsonNode q, ObjectNode out) {
        String op = q.get("op").asText();
        try {
            switch (op) {
                case "parse":
                    parse(q.get("schema").asText(), false);
                    break;
                case "parse_defaults":
                    parse(q.get("schema").asText(), true);
                    break;
                case "can_read":
                    Schema reader = parse(q.get("reader").asText(), false);
                    Schema writer = parse(q.get("writer").asText(), false);
                    try {
                        new SchemaValidatorBuilder().canReadStrategy().validateLatest()
                                .validate(reader, Collections.singletonList(writer));
                    } catch (SchemaValidationException e) {
                        out.put("result", "incompatible");
                        return;
                    }
                    break;
                default:
                    throw new IllegalArgumentException("unknown op " + op);
            }
            out.put("result", "ok");
        } catch (RuntimeException | StackOverflowError e) {
            out.put("result", "error");
            out.put("detail", e.getClass().getName() + ": " + e.getMessage());
        }
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        InputStream in = System.in;
        JsonNode questions = mapper.readTree(in);
        ArrayNode answers = mapper.createArrayNode();
        for (JsonNode q : questions) {
            answer(q, answers.addObject());
        }
        mapper.writeValue(System.out, answers);
    }
}
