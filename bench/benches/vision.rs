//! Micro-benchmark: preparing a picture for a vision encoder (decode,
//! pad to a square, resize to the encoder's input), as a model's runner
//! does before the encoder runs. Run with
//! `cargo bench -p rkllm-bench --bench vision`.

use std::hint::black_box;
use std::io::Cursor;

use criterion::{Criterion, criterion_group, criterion_main};
use image::ImageFormat;
use rkllm_server::backend::image::{ImageLimits, inspect, prepare};

#[path = "../src/picture.rs"]
mod picture;

fn preprocessing(c: &mut Criterion) {
    let jpeg = picture::photo_jpeg();
    let png = {
        let picture = image::load_from_memory(&jpeg).unwrap().into_rgb8();
        let mut out = Cursor::new(Vec::new());
        picture.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    };
    let mut group = c.benchmark_group("vision");
    group.bench_function("decode a 1024x768 JPEG (part of prepare)", |b| {
        b.iter(|| {
            image::load_from_memory(black_box(&jpeg))
                .unwrap()
                .into_rgb8()
        });
    });
    group.bench_function("check a 1024x768 JPEG's header (before queueing)", |b| {
        b.iter(|| inspect(black_box(&jpeg), &ImageLimits::default()).unwrap());
    });
    for side in [392, 448] {
        group.bench_function(
            format!("prepare a 1024x768 JPEG for a {side}x{side} encoder"),
            |b| {
                b.iter(|| {
                    prepare(
                        black_box(&jpeg),
                        side,
                        side,
                        [128, 128, 128],
                        &ImageLimits::default(),
                    )
                    .unwrap()
                });
            },
        );
    }
    group.bench_function("prepare a 1024x768 PNG for a 448x448 encoder", |b| {
        b.iter(|| {
            prepare(
                black_box(&png),
                448,
                448,
                [128, 128, 128],
                &ImageLimits::default(),
            )
            .unwrap()
        });
    });
    group.finish();
}

criterion_group!(benches, preprocessing);
criterion_main!(benches);
