// Rust jobs for the f7r- tuning cases: a feature tool that dies of an uncaught panic, an
// unwrap of a missing file, or an allocation the address space cannot hold (rules rust_*).
// Usage: f7rs MODE [ARG]
use std::env;
use std::fs;

fn parse_dims(spec: &str) -> Vec<usize> {
    spec.split('x').map(|d| d.trim().parse::<usize>().unwrap()).collect()
}

fn main() {
    let args: Vec<String> = env::args().collect();
    let mode = args[1].as_str();
    println!("featurize: mode {}", mode);
    match mode {
        // a shape spec with a typo: unwrap() of a ParseIntError panics
        "dims" => {
            let dims = parse_dims("512x5l2");
            println!("dims {:?}", dims);
        }
        // a vocabulary file that is not there, read with expect()
        "vocab" => {
            let text = fs::read_to_string(&args[2]).expect("reading the vocabulary");
            println!("{} tokens", text.lines().count());
        }
        // an index past the end of a buffer
        "lookup" => {
            let table: Vec<u32> = (0..4096).collect();
            let ids: Vec<usize> = vec![17, 4095, 4096];
            for id in ids {
                println!("id {} -> {}", id, table[id]);
            }
        }
        // one buffer the size of the whole corpus: more than the address space allows
        "buffer" => {
            let n: usize = args[2].parse().unwrap();
            println!("allocating a {} GiB feature buffer", n >> 30);
            let mut v: Vec<u8> = Vec::with_capacity(n);
            v.push(1);
            println!("buffer ready: {}", v.len());
        }
        _ => println!("unknown mode"),
    }
}
