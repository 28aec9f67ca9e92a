// Held-out set 6's JVM jobs: `java -cp DIR Ho6Jobs MODE [ARG]` (a Spark-less feature pipeline).
// npe: a record with a missing field dereferenced; fnf ARG: a config that is not there;
// write ARG: writes 4 MiB of features (permission or space fails it); heap: caches rows until
// the heap (-Xmx) is exhausted; exit4: finishes its loop and exits 4 saying nothing; deadlock:
// two writer threads taking two locks in opposite order; gc_ok: allocation-heavy but fine (run
// with -Xlog:gc); unsafe: a native write through address 0 (the JVM's own fatal error report);
// ckpt ARG: reads a serialized model whose stream header is wrong; loop: progress forever.
import java.io.*;
import java.lang.reflect.Field;
import java.util.*;

public class Ho6Jobs {
    static void say(String s) { System.out.println(s); System.out.flush(); }

    static String field(Map<String, String> rec, String k) { return rec.get(k); }

    public static void main(String[] a) throws Exception {
        String mode = a[0];
        switch (mode) {
            case "npe": {
                List<Map<String, String>> recs = new ArrayList<>();
                for (int i = 0; i < 5; i++) {
                    Map<String, String> m = new HashMap<>();
                    m.put("id", "r" + i);
                    if (i != 3) m.put("lang", "en");
                    recs.add(m);
                }
                for (Map<String, String> r : recs) say(r.get("id") + " lang=" + field(r, "lang").toUpperCase());
                break;
            }
            case "fnf": {
                say("reading pipeline config " + a[1]);
                try (BufferedReader br = new BufferedReader(new FileReader(a[1]))) { say(br.readLine()); }
                break;
            }
            case "write": {
                byte[] block = new byte[1 << 16];
                Arrays.fill(block, (byte) 7);
                say("writing features to " + a[1]);
                try (FileOutputStream out = new FileOutputStream(a[1])) {
                    for (int i = 0; i < 64; i++) { out.write(block); out.getFD().sync(); }
                }
                say("features written");
                break;
            }
            case "heap": {
                List<long[]> cache = new ArrayList<>();
                for (int i = 0; ; i++) {
                    cache.add(new long[1 << 17]);
                    if (i % 50 == 0) say("cached " + i + " row groups");
                }
            }
            case "exit4": {
                for (int i = 0; i < 5; i++) say("partition " + i + ": 20000 rows joined");
                System.exit(4);
            }
            case "deadlock": {
                final Object index = new Object(), journal = new Object();
                Thread t1 = new Thread(() -> { synchronized (index) { sleep(500); synchronized (journal) { say("t1 committed"); } } });
                Thread t2 = new Thread(() -> { synchronized (journal) { sleep(500); synchronized (index) { say("t2 committed"); } } });
                say("committing shard index and journal from 2 writer threads");
                t1.start(); t2.start(); t1.join(); t2.join();
                say("commit done");
                break;
            }
            case "gc_ok": {
                long sum = 0;
                for (int i = 0; i < 400; i++) { long[] tmp = new long[1 << 16]; tmp[i % tmp.length] = i; sum += tmp[i % tmp.length]; }
                say("aggregation finished, checksum " + sum + ", 0 failed records");
                break;
            }
            case "unsafe": {
                Field f = Class.forName("sun.misc.Unsafe").getDeclaredField("theUnsafe");
                f.setAccessible(true);
                sun.misc.Unsafe u = (sun.misc.Unsafe) f.get(null);
                say("copying the off-heap feature buffer");
                u.putLong(0L, 42L);
                say("copied");
                break;
            }
            case "ckpt": {
                say("loading model " + a[1]);
                try (ObjectInputStream in = new ObjectInputStream(new FileInputStream(a[1]))) { say(String.valueOf(in.readObject())); }
                break;
            }
            case "loop": {
                for (int i = 0; ; i++) { say("batch " + i + " processed"); sleep(1000); }
            }
            default:
                throw new IllegalArgumentException(mode);
        }
    }

    static void sleep(long ms) { try { Thread.sleep(ms); } catch (InterruptedException e) { throw new RuntimeException(e); } }
}
