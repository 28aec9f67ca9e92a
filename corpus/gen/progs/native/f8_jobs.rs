// f8b- tuning cases: a Rust step whose panic says what went wrong - a stack overflow (the
// guard page's SIGSEGV turned into "has overflowed its stack" + abort, std's
// sys/unix/stack_overflow.rs), a training loop's finite check on its loss or gradient norm,
// and a TCP read from a data server that went away. Usage: f8rs MODE [ARG]
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn depth(n: u64, pad: [u8; 256]) -> u64 {
    // one frame per node of a degenerate (linked-list) tree
    if n == 0 { return pad[0] as u64; }
    depth(n - 1, pad) + 1 + (pad[(n % 256) as usize] as u64)
}

fn sgd(lr: f64, steps: usize, guard: &str) {
    let (mut w, target) = (3.0f64, 1.0f64);
    for step in 0..steps {
        let grad = 2.0 * (w - target) * w * w;
        let loss = (w - target).powi(2) * w * w;
        if step % 10 == 0 { println!("step {:4} loss {:.6e} grad {:.4e}", step, loss, grad); }
        match guard {
            "assert" => assert!(loss.is_finite()),
            "grad" => if !grad.is_finite() { panic!("gradient norm is {} at step {}", grad.abs(), step) },
            _ => {}
        }
        w -= lr * grad;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    match mode {
        "overflow_main" => {
            println!("walking the merge forest (depth 50000000)");
            println!("{}", depth(50_000_000, [1u8; 256]));
        }
        "overflow_thread" => {
            println!("spawning 1 tokenizer thread");
            let h = std::thread::Builder::new().name("tokenizer-0".into()).stack_size(256 * 1024)
                .spawn(|| depth(10_000_000, [2u8; 256])).unwrap();
            println!("{}", h.join().unwrap());
        }
        "nan_assert" => sgd(0.3, 400, "assert"),
        "nan_grad" => sgd(0.3, 400, "grad"),
        "tcp_read" => {
            let addr = args.get(2).expect("address");
            println!("fetching shard index from {}", addr);
            let mut s = TcpStream::connect(addr.as_str()).expect("connect to the shard server");
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            s.write_all(b"GET /index HTTP/1.0\r\n\r\n").unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).expect("read shard index");
            println!("{} bytes", buf.len());
        }
        _ => { eprintln!("unknown mode {}", mode); std::process::exit(2) }
    }
}
