// Held-out set 8's Rust jobs (a data-prep / simulation binary as users build them):
// `ho8_rs MODE [ARG ...]`, each failing (or not) by itself. Built with plain rustc, no crates.
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::{env, fs, process, thread, time};

fn parse_cfg() {
    let lines = ["batch_size=64", "epochs=12", "seq_len=2k"];
    for l in lines {
        let (k, v) = l.split_once('=').unwrap();
        let n: u64 = v.parse().unwrap();
        println!("{k} = {n}");
    }
}

fn read(path: &str) {
    println!("loading vocabulary from {path}");
    let text = fs::read_to_string(path).unwrap();
    println!("{} entries", text.lines().count());
}

fn write(path: &str, mb: usize) {
    println!("writing {mb} MiB of packed token ids to {path}");
    let mut f = fs::File::create(path).expect("create output shard");
    let block = vec![7u8; 1 << 20];
    for i in 0..mb {
        f.write_all(&block).expect("write token shard");
        if i % 16 == 0 { println!("  {i} MiB"); }
    }
    f.sync_all().expect("sync token shard");
    println!("done");
}

fn alloc() {
    let mut tables: Vec<Vec<u64>> = Vec::new();
    for i in 0.. {
        let n = 64usize << 20; // 512 MiB of u64 per table
        println!("allocating n-gram table {i} ({} MiB)", n * 8 >> 20);
        let mut v: Vec<u64> = Vec::with_capacity(n);
        v.resize(n, i as u64);
        tables.push(v);
    }
}

fn segv() {
    println!("mapping feature store");
    let p: *const u64 = std::ptr::null();
    let bad = unsafe { std::ptr::read_volatile(p.wrapping_add(0x10)) };
    println!("{bad}");
}

fn depth(n: u64, acc: &mut [u8; 4096]) -> u64 {
    acc[(n % 4096) as usize] = n as u8;
    if n == 0 { 0 } else { 1 + depth(n - 1, acc) + acc[0] as u64 }
}

fn recurse() {
    println!("building merge tree over 10000000 nodes");
    let mut acc = [0u8; 4096];
    println!("{}", depth(10_000_000, &mut acc));
}

fn slow() {
    println!("simulating 400 trajectories");
    for i in 0..400 {
        thread::sleep(time::Duration::from_secs(2));
        println!("trajectory {i} done, energy {:.4}", -1.0 - (i as f64) * 0.001);
    }
}

fn quiet(code: i32) {
    println!("checking 40 shards");
    for i in 0..40 { if i % 10 == 0 { println!("shard {i} ok"); } }
    process::exit(code);
}

fn deadlock() {
    let a = Arc::new(Mutex::new(0u64));
    let b = Arc::new(Mutex::new(0u64));
    println!("starting 2 writer threads");
    let (a2, b2) = (a.clone(), b.clone());
    let t = thread::spawn(move || {
        let _gb = b2.lock().unwrap();
        thread::sleep(time::Duration::from_millis(200));
        let _ga = a2.lock().unwrap();
    });
    let _ga = a.lock().unwrap();
    thread::sleep(time::Duration::from_millis(200));
    let _gb = b.lock().unwrap();
    t.join().unwrap();
    println!("never printed");
}

// plain gradient descent on a least-squares problem with a step size too large for it
fn gd(guard: bool) {
    let xs: Vec<f64> = (0..64).map(|i| i as f64 * 0.5).collect();
    let ys: Vec<f64> = xs.iter().map(|x| 3.0 * x + 1.0).collect();
    let (mut w, mut b, lr) = (0.0f64, 0.0f64, 0.02f64);
    for step in 0..300 {
        let (mut gw, mut gb, mut loss) = (0.0, 0.0, 0.0);
        for (x, y) in xs.iter().zip(&ys) {
            let e = w * x + b - y;
            loss += e * e; gw += 2.0 * e * x; gb += 2.0 * e;
        }
        let n = xs.len() as f64;
        loss /= n; w -= lr * gw / n; b -= lr * gb / n;
        if step % 20 == 0 { println!("step {step:4} loss {loss:.6e} w {w:.4e}"); }
        if guard { assert!(loss.is_finite(), "loss diverged at step {step}: {loss}"); }
    }
    println!("final w={w} b={b}");
    println!("saved weights to fit.bin");
}

fn warn_ok() {
    println!("fitting 4 shards");
    for i in 0..4 { println!("shard {i}: rmse {:.4}", 0.3 / (i as f64 + 1.0)); }
    println!("done");
}

fn main() {
    let a: Vec<String> = env::args().collect();
    let arg = |i: usize| a.get(i).cloned().unwrap_or_default();
    match a.get(1).map(|s| s.as_str()).unwrap_or("") {
        "parse" => parse_cfg(),
        "read" => read(&arg(2)),
        "write" => write(&arg(2), arg(3).parse().unwrap_or(64)),
        "alloc" => alloc(),
        "segv" => segv(),
        "recurse" => recurse(),
        "slow" => slow(),
        "quiet" => quiet(arg(2).parse().unwrap_or(3)),
        "deadlock" => deadlock(),
        "gd_guard" => gd(true),
        "gd" => gd(false),
        "warn_ok" => warn_ok(),
        m => { eprintln!("unknown mode {m}"); process::exit(64); }
    }
}
