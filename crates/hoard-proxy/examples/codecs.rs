#![allow(clippy::disallowed_methods)] // a measuring tool: wall-clock timing is the point
//! Speed and ratio of each content coding at several levels on a text
//! corpus (for docs/encodings.md): MB/s of identity
//! bytes compressed, and the size against identity.
//!
//!     cargo run --release -p hoard-proxy --example codecs [FILE...]

use std::io::Write;
use std::time::Instant;

fn corpus() -> Vec<Vec<u8>> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if !files.is_empty() {
        return files
            .iter()
            .map(|f| std::fs::read(f).expect("read a corpus file"))
            .collect();
    }
    // An HTML page and a JSON document, 64 KiB each, with the repetition
    // and variety of real ones.
    let mut html = String::from("<!doctype html><html><head><title>News</title></head><body>\n");
    let mut i = 0u64;
    while html.len() < 64 << 10 {
        i += 1;
        html.push_str(&format!(
            "<article id=\"a{i}\"><h2><a href=\"/news/{}/{i}\">Headline number {i} about topic {}</a></h2><p class=\"lead\">Posted {} minutes ago by author {} in section {}.</p></article>\n",
            i * 7919 % 1000, i % 37, i * 13 % 600, i % 11, i % 5
        ));
    }
    let mut json = String::from("[");
    let mut j = 0u64;
    while json.len() < 64 << 10 {
        j += 1;
        json.push_str(&format!(
            "{{\"id\":{j},\"sku\":\"SKU-{:06}\",\"price\":{}.{:02},\"stock\":{},\"tags\":[\"t{}\",\"t{}\"],\"name\":\"Product {j}\"}},",
            j * 7919 % 999_999, j % 200, j % 100, j * 3 % 50, j % 9, j % 4
        ));
    }
    json.push_str("{}]");
    vec![html.into_bytes(), json.into_bytes()]
}

fn main() {
    let inputs = corpus();
    let total: usize = inputs.iter().map(Vec::len).sum();
    println!("corpus: {} files, {} bytes", inputs.len(), total);
    println!("| coding | level | MB/s compressing | size vs identity | MB/s decoding |");
    println!("|---|---|---|---|---|");
    type Enc = Box<dyn Fn(&[u8]) -> Vec<u8>>;
    let gzip = |level: u32| -> Enc {
        Box::new(move |d: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(d).unwrap();
            e.finish().unwrap()
        })
    };
    let br = |q: i32| -> Enc {
        Box::new(move |d: &[u8]| {
            let mut out = Vec::new();
            let p = brotli::enc::BrotliEncoderParams {
                quality: q,
                lgwin: 22,
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &d[..], &mut out, &p).unwrap();
            out
        })
    };
    let zstd = |l: i32| -> Enc { Box::new(move |d: &[u8]| zstd::bulk::compress(d, l).unwrap()) };
    let cases: Vec<(&str, String, Enc, hoard_policy::encoding::Coding)> = vec![
        (
            "gzip",
            "1".into(),
            gzip(1),
            hoard_policy::encoding::Coding::Gzip,
        ),
        (
            "gzip",
            "6".into(),
            gzip(6),
            hoard_policy::encoding::Coding::Gzip,
        ),
        (
            "gzip",
            "9".into(),
            gzip(9),
            hoard_policy::encoding::Coding::Gzip,
        ),
        ("br", "5".into(), br(5), hoard_policy::encoding::Coding::Br),
        ("br", "9".into(), br(9), hoard_policy::encoding::Coding::Br),
        (
            "br",
            "11".into(),
            br(11),
            hoard_policy::encoding::Coding::Br,
        ),
        (
            "zstd",
            "3".into(),
            zstd(3),
            hoard_policy::encoding::Coding::Zstd,
        ),
        (
            "zstd",
            "15".into(),
            zstd(15),
            hoard_policy::encoding::Coding::Zstd,
        ),
        (
            "zstd",
            "19".into(),
            zstd(19),
            hoard_policy::encoding::Coding::Zstd,
        ),
    ];
    for (name, level, enc, coding) in cases {
        let rounds = 5;
        let started = Instant::now();
        let mut out = 0usize;
        let mut coded = Vec::new();
        for _ in 0..rounds {
            coded = inputs.iter().map(|d| enc(d)).collect::<Vec<_>>();
            out = coded.iter().map(Vec::len).sum();
        }
        let secs = started.elapsed().as_secs_f64() / rounds as f64;
        let started = Instant::now();
        for _ in 0..rounds {
            for c in &coded {
                hoard_proxy::encode::decode(coding, c, 1 << 30).unwrap();
            }
        }
        let dsecs = started.elapsed().as_secs_f64() / rounds as f64;
        println!(
            "| {name} | {level} | {:.0} | {:.1} % | {:.0} |",
            total as f64 / secs / 1e6,
            100.0 * out as f64 / total as f64,
            total as f64 / dsecs / 1e6
        );
    }
}
