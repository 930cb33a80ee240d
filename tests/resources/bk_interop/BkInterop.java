import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.api.DigestType;
import org.apache.bookkeeper.client.api.LastConfirmedAndEntry;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerEntry;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.api.ReadHandle;
import org.apache.bookkeeper.client.api.WriteHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.discover.BookieServiceInfo;
import org.apache.bookkeeper.discover.RegistrationClient;
import org.apache.bookkeeper.meta.LedgerLayout;
import org.apache.bookkeeper.meta.LedgerMetadataSerDe;
import org.apache.bookkeeper.net.BookieId;

/**
 * Drives Apache BookKeeper's own Java client for Magnetar's interoperability tests.
 *
 * One JSON request a line on standard input, one JSON answer a line on standard output, in order.
 * Every answer has "ok": true plus the operation's fields, or "ok": false with "error" (the
 * exception's class), "code" (BookKeeper's error code when it is a BKException) and "message".
 * Byte strings travel as base64. Ledger handles stay open between requests, keyed by ledger id.
 *
 *   connect   {uri, [timeoutS], [metadataFormatVersion], [v2WireProtocol]}  open the client on a metadata service
 *                                            URI (zk://...), writing new ledgers' metadata in that format,
 *                                            closing the previous one and its handles
 *   initCluster {uri}                        BookKeeperAdmin.initNewCluster (LAYOUT, INSTANCEID, ...)
 *   create    {digest, password, e, qw, qa, [custom: {k: b64}]} -> {ledgerId}
 *   append    {ledgerId, entries: [b64]}     adds in order, waits for each -> {entryIds}
 *   appendAsync {ledgerId, entries: [b64]}   starts the adds, answers without waiting for them
 *   closeWriter {ledgerId}
 *   open      {ledgerId, digest, password, recovery} -> the handle's state (see state())
 *   read      {ledgerId, first, last}        -> {entries: [b64]} (from a reader, else the writer)
 *   readLac   {ledgerId}                     readLastAddConfirmed -> {lac}
 *   longPollLac {ledgerId, entryId, timeoutMs} readLastAddConfirmedAndEntry -> {lac, entry?}
 *   closeReader {ledgerId}
 *   delete    {ledgerId}
 *   metadata  {ledgerId}                     the stored metadata as this client reads it
 *   bookies   {}                             writable / read-only bookies and each one's service info
 *   parseMetadata {ledgerId, data}           LedgerMetadataSerDe.parseConfig of stored bytes
 *   serializeMetadata {ledgerId}             the bytes this client would store for the ledger
 *   parseCookie {data}                       Cookie.parseFromBytes -> its fields
 *   parseLayout {data}                       LedgerLayout.parseLayout -> {factory, managerVersion}
 *   exit
 */
public final class BkInterop {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final Base64.Decoder UNB64 = Base64.getDecoder();

    private BookKeeper bk;
    private String uri;
    private int timeoutS = 10;
    private int metadataFormatVersion = -1;
    private boolean v2WireProtocol = false;
    private final Map<Long, WriteHandle> writers = new HashMap<>();
    private final Map<Long, ReadHandle> readers = new HashMap<>();
    private final List<CompletableFuture<Long>> pending = new ArrayList<>();

    private BkInterop() {}

    private static DigestType digest(String name) {
        switch (name.toUpperCase()) {
            case "HMAC":
            case "MAC":
                return DigestType.MAC;
            default:
                return DigestType.valueOf(name.toUpperCase());
        }
    }

    private static byte[] b64(JsonNode n) {
        return UNB64.decode(n.asText());
    }

    private ClientConfiguration clientConf() {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        conf.setZkTimeout(timeoutS * 1000);
        conf.setAddEntryTimeout(timeoutS);
        conf.setReadEntryTimeout(timeoutS);
        // a bookie that dies stays in the ensemble: the recovery tests want the writer's ensemble
        conf.setDelayEnsembleChange(false);
        conf.setLedgerMetadataFormatVersion(metadataFormatVersion);
        conf.setUseV2WireProtocol(v2WireProtocol);
        return conf;
    }

    private void state(ReadHandle h, ObjectNode out) {
        out.put("ledgerId", h.getId());
        out.put("lac", h.getLastAddConfirmed());
        out.put("length", h.getLength());
        out.put("closed", h.isClosed());
        metadata(h.getLedgerMetadata(), out.putObject("metadata"));
    }

    private static void metadata(LedgerMetadata md, ObjectNode out) {
        out.put("formatVersion", md.getMetadataFormatVersion());
        out.put("ensembleSize", md.getEnsembleSize());
        out.put("writeQuorum", md.getWriteQuorumSize());
        out.put("ackQuorum", md.getAckQuorumSize());
        out.put("state", md.getState().name());
        out.put("lastEntryId", md.getLastEntryId());
        out.put("length", md.getLength());
        out.put("digest", md.getDigestType().name());
        out.put("password", B64.encodeToString(md.getPassword()));
        out.put("ctime", md.getCtime());
        out.put("cToken", md.getCToken());
        ObjectNode custom = out.putObject("custom");
        md.getCustomMetadata().forEach((k, v) -> custom.put(k, B64.encodeToString(v)));
        ArrayNode segments = out.putArray("segments");
        md.getAllEnsembles().forEach((first, ensemble) -> {
            ObjectNode seg = segments.addObject();
            seg.put("firstEntryId", first);
            ArrayNode members = seg.putArray("ensemble");
            ensemble.forEach(b -> members.add(b.toString()));
        });
    }

    private ReadHandle reader(long id) {
        ReadHandle h = readers.get(id);
        if (h == null) {
            h = writers.get(id);
        }
        if (h == null) {
            throw new IllegalArgumentException("no open handle for ledger " + id);
        }
        return h;
    }

    private void answer(JsonNode q, ObjectNode out) throws Exception {
        String op = q.get("op").asText();
        switch (op) {
            case "connect": {
                closeAll();
                uri = q.get("uri").asText();
                if (q.has("timeoutS")) {
                    timeoutS = q.get("timeoutS").asInt();
                }
                metadataFormatVersion = q.path("metadataFormatVersion").asInt(-1);
                v2WireProtocol = q.path("v2WireProtocol").asBoolean(false);
                bk = new BookKeeper(clientConf());
                break;
            }
            case "initCluster": {
                ServerConfiguration conf = new ServerConfiguration();
                conf.setMetadataServiceUri(q.get("uri").asText());
                out.put("initialized", BookKeeperAdmin.initNewCluster(conf));
                break;
            }
            case "create": {
                var b = bk.newCreateLedgerOp()
                        .withDigestType(digest(q.get("digest").asText()))
                        .withPassword(b64(q.get("password")))
                        .withEnsembleSize(q.get("e").asInt())
                        .withWriteQuorumSize(q.get("qw").asInt())
                        .withAckQuorumSize(q.get("qa").asInt());
                if (q.has("custom")) {
                    Map<String, byte[]> custom = new HashMap<>();
                    q.get("custom").fields().forEachRemaining(e -> custom.put(e.getKey(), b64(e.getValue())));
                    b = b.withCustomMetadata(custom);
                }
                WriteHandle h = b.execute().get(timeoutS, TimeUnit.SECONDS);
                writers.put(h.getId(), h);
                out.put("ledgerId", h.getId());
                break;
            }
            case "append": {
                WriteHandle h = writers.get(q.get("ledgerId").asLong());
                ArrayNode ids = out.putArray("entryIds");
                for (JsonNode e : q.get("entries")) {
                    ids.add(h.append(b64(e)));
                }
                break;
            }
            case "appendAsync": {
                WriteHandle h = writers.get(q.get("ledgerId").asLong());
                for (JsonNode e : q.get("entries")) {
                    pending.add(h.appendAsync(b64(e)));
                }
                break;
            }
            case "closeWriter": {
                WriteHandle h = writers.remove(q.get("ledgerId").asLong());
                h.close();
                state(h, out);
                break;
            }
            case "open": {
                long id = q.get("ledgerId").asLong();
                ReadHandle h = bk.newOpenLedgerOp()
                        .withLedgerId(id)
                        .withDigestType(digest(q.get("digest").asText()))
                        .withPassword(b64(q.get("password")))
                        .withRecovery(q.get("recovery").asBoolean())
                        .execute().get(timeoutS * 3L, TimeUnit.SECONDS);
                ReadHandle old = readers.put(id, h);
                if (old != null) {
                    old.close();
                }
                state(h, out);
                break;
            }
            case "read": {
                ReadHandle h = reader(q.get("ledgerId").asLong());
                ArrayNode entries = out.putArray("entries");
                try (LedgerEntries got = h.read(q.get("first").asLong(), q.get("last").asLong())) {
                    for (LedgerEntry e : got) {
                        entries.add(B64.encodeToString(e.getEntryBytes()));
                    }
                }
                break;
            }
            case "readLac": {
                out.put("lac", reader(q.get("ledgerId").asLong()).readLastAddConfirmed());
                break;
            }
            case "longPollLac": {
                ReadHandle h = reader(q.get("ledgerId").asLong());
                try (LastConfirmedAndEntry r = h.readLastAddConfirmedAndEntry(
                        q.get("entryId").asLong(), q.get("timeoutMs").asLong(), false)) {
                    out.put("lac", r.getLastAddConfirmed());
                    if (r.hasEntry()) {
                        out.put("entry", B64.encodeToString(r.getEntry().getEntryBytes()));
                    }
                }
                break;
            }
            case "closeReader": {
                ReadHandle h = readers.remove(q.get("ledgerId").asLong());
                if (h != null) {
                    h.close();
                }
                break;
            }
            case "delete": {
                bk.newDeleteLedgerOp().withLedgerId(q.get("ledgerId").asLong()).execute()
                        .get(timeoutS, TimeUnit.SECONDS);
                break;
            }
            case "metadata": {
                LedgerMetadata md = bk.getLedgerManager().readLedgerMetadata(q.get("ledgerId").asLong())
                        .get(timeoutS, TimeUnit.SECONDS).getValue();
                metadata(md, out);
                break;
            }
            case "bookies": {
                RegistrationClient rc = bk.getMetadataClientDriver().getRegistrationClient();
                ObjectNode info = out.putObject("serviceInfo");
                ArrayNode writable = out.putArray("writable");
                for (BookieId id : rc.getWritableBookies().get(timeoutS, TimeUnit.SECONDS).getValue()) {
                    writable.add(id.toString());
                    serviceInfo(rc, id, info.putObject(id.toString()));
                }
                ArrayNode readOnly = out.putArray("readOnly");
                for (BookieId id : rc.getReadOnlyBookies().get(timeoutS, TimeUnit.SECONDS).getValue()) {
                    readOnly.add(id.toString());
                    serviceInfo(rc, id, info.putObject(id.toString()));
                }
                break;
            }
            case "parseMetadata": {
                LedgerMetadata md = new LedgerMetadataSerDe().parseConfig(
                        b64(q.get("data")), q.get("ledgerId").asLong(), Optional.empty());
                metadata(md, out);
                break;
            }
            case "serializeMetadata": {
                LedgerMetadata md = bk.getLedgerManager().readLedgerMetadata(q.get("ledgerId").asLong())
                        .get(timeoutS, TimeUnit.SECONDS).getValue();
                out.put("data", B64.encodeToString(new LedgerMetadataSerDe().serialize(md)));
                break;
            }
            case "parseCookie": {
                // Cookie's accessors are package-private; its toString prints the stored form again,
                // which the test compares with what Magnetar wrote.
                Cookie c = Cookie.parseFromBytes(b64(q.get("data")));
                out.put("text", c.toString());
                break;
            }
            case "parseLayout": {
                LedgerLayout layout = LedgerLayout.parseLayout(b64(q.get("data")));
                out.put("factory", layout.getManagerFactoryClass());
                out.put("managerVersion", layout.getManagerVersion());
                out.put("layoutFormatVersion", layout.getLayoutFormatVersion());
                break;
            }
            case "exit":
                break;
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private void closeAll() throws Exception {
        for (ReadHandle h : readers.values()) {
            h.close();
        }
        readers.clear();
        writers.clear();  // a writer left open is abandoned, as by a crashed process
        pending.clear();
        if (bk != null) {
            bk.close();
            bk = null;
        }
    }

    private void serviceInfo(RegistrationClient rc, BookieId id, ObjectNode out) {
        try {
            BookieServiceInfo info = rc.getBookieServiceInfo(id).get(timeoutS, TimeUnit.SECONDS).getValue();
            ArrayNode endpoints = out.putArray("endpoints");
            for (BookieServiceInfo.Endpoint e : info.getEndpoints()) {
                ObjectNode n = endpoints.addObject();
                n.put("id", e.getId());
                n.put("host", e.getHost());
                n.put("port", e.getPort());
                n.put("protocol", e.getProtocol());
                ArrayNode ext = n.putArray("extensions");
                e.getExtensions().forEach(ext::add);
            }
            ObjectNode props = out.putObject("properties");
            info.getProperties().forEach(props::put);
        } catch (Exception e) {
            out.put("error", e.toString());
        }
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof java.util.concurrent.ExecutionException
                || t instanceof java.util.concurrent.CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    public static void main(String[] args) throws Exception {
        PrintStream stdout = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        System.setOut(System.err);  // anything a library prints goes to the log, not to the answers
        BkInterop self = new BkInterop();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode out = JSON.createObjectNode();
            String op = "";
            try {
                JsonNode q = JSON.readTree(line);
                op = q.path("op").asText();
                self.answer(q, out);
                out.put("ok", true);
            } catch (Throwable t) {
                Throwable e = unwrap(t);
                out.removeAll();
                out.put("ok", false);
                out.put("error", e.getClass().getName());
                out.put("message", String.valueOf(e.getMessage()));
                if (e instanceof BKException) {
                    out.put("code", ((BKException) e).getCode());
                } else if (e instanceof org.apache.bookkeeper.client.api.BKException) {
                    out.put("code", ((org.apache.bookkeeper.client.api.BKException) e).getCode());
                }
            }
            stdout.println(JSON.writeValueAsString(out));
            if ("exit".equals(op)) {
                break;
            }
        }
        try {
            self.closeAll();
        } catch (Exception e) {
            e.printStackTrace();
        }
        System.exit(0);
    }
}
