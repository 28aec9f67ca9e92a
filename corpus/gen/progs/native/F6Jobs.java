// JVM jobs for the f6j- tuning cases (uncaught exceptions as the JVM prints them: heap,
// arrays, direct buffers, cause chains, missing classes, serialized models, paths).
// Situations differ from holdout6's Ho6Jobs.java on purpose.
import java.io.*;
import java.nio.ByteBuffer;
import java.nio.file.*;
import java.util.*;

public class F6Jobs {
    static void say(String s) { System.out.println(s); System.out.flush(); }

    // a vocabulary built from generated tokens that never stops growing (-Xmx small)
    static void vocab() {
        Map<String, Integer> counts = new HashMap<>();
        for (long i = 0; ; i++) {
            counts.merge("tok-" + i + "-" + (i * 31 % 977), 1, Integer::sum);
            if (i % 200000 == 0) say("vocab size " + counts.size());
        }
    }

    // one feature matrix sized from a wrong row count
    static void matrix() {
        say("allocating feature matrix for 2147483647 rows");
        long[] m = new long[Integer.MAX_VALUE];
        say("got " + m.length);
    }

    // a reader pool that keeps direct buffers (-XX:MaxDirectMemorySize small)
    static void directBuffers() {
        List<ByteBuffer> pool = new ArrayList<>();
        for (int i = 0; ; i++) {
            pool.add(ByteBuffer.allocateDirect(4 << 20));
            say("pooled buffer " + i);
        }
    }

    // a worker thread parsing a CSV row dies of a bad number; the wrapper rethrows with a cause
    static void parseWorker() throws Exception {
        Thread t = new Thread(() -> {
            String[] rows = {"1,0.5", "2,0.25", "3,n/a"};
            for (String r : rows) {
                try {
                    double v = Double.parseDouble(r.split(",")[1]);
                    say("row " + r + " -> " + v);
                } catch (NumberFormatException e) {
                    throw new IllegalStateException("cannot parse label column of row '" + r + "'", e);
                }
            }
        }, "csv-loader-0");
        t.start();
        t.join();
        System.exit(1);
    }

    // loading a vocabulary file through a service layer: the cause is the missing file
    static List<String> readVocab(String path) {
        try (BufferedReader br = new BufferedReader(new FileReader(path))) {
            List<String> out = new ArrayList<>();
            for (String l; (l = br.readLine()) != null; ) out.add(l);
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException("vocabulary unavailable", e);
        }
    }

    static void vocabService(String path) {
        try {
            say("starting tokenizer service");
            readVocab(path);
        } catch (RuntimeException e) {
            throw new RuntimeException("tokenizer service failed to start", e);
        }
    }

    // java.nio reading a shard list that is not there
    static void shards(String path) throws IOException {
        say("reading shard list " + path);
        List<String> lines = Files.readAllLines(Paths.get(path));
        say("shards: " + lines.size());
    }

    // writing a report into a directory the job may not write
    static void report(String path) throws IOException {
        say("writing report " + path);
        Files.write(Paths.get(path), "ok\n".getBytes());
    }

    // a plugin class named in a config that is not on the class path
    static void plugin(String name) throws Exception {
        say("loading scorer plugin " + name);
        Class<?> c = Class.forName(name);
        say("loaded " + c);
    }

    // uses a helper class compiled separately; the case runs without it on the class path
    static void helper() {
        say("normalising features");
        say("mean " + F6Dep.mean(new double[]{1, 2, 3}));
    }

    static void saveModel(String path) throws IOException {
        try (ObjectOutputStream out = new ObjectOutputStream(new FileOutputStream(path))) {
            HashMap<String, double[]> w = new HashMap<>();
            for (int i = 0; i < 64; i++) w.put("layer" + i, new double[256]);
            out.writeObject(w);
        }
    }

    static void loadModel(String path) throws Exception {
        say("restoring weights from " + path);
        try (ObjectInputStream in = new ObjectInputStream(new BufferedInputStream(new FileInputStream(path)))) {
            Object o = in.readObject();
            say("restored " + ((Map<?, ?>) o).size() + " tensors");
        }
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "vocab": vocab(); break;
            case "matrix": matrix(); break;
            case "direct": directBuffers(); break;
            case "parse": parseWorker(); break;
            case "service": vocabService(a[1]); break;
            case "shards": shards(a[1]); break;
            case "report": report(a[1]); break;
            case "plugin": plugin(a[1]); break;
            case "helper": helper(); break;
            case "save": saveModel(a[1]); break;
            case "load": loadModel(a[1]); break;
            default: throw new IllegalArgumentException("mode " + a[0]);
        }
    }
}

class F6Dep {
    static double mean(double[] x) { double s = 0; for (double v : x) s += v; return s / x.length; }
}
