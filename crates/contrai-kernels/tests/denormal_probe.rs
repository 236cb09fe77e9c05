//! The probe that counts subnormal values at each kernel (its own test binary: probing keeps
//! denormals for the whole process).
#![cfg(target_arch = "x86_64")]

use burn::tensor::{Device, Tensor, TensorData};
use contrai_kernels::denormals::{flushed_here, probe, probed, tally};

#[test]
fn the_probe_counts_subnormal_values_by_kernel_with_denormals_kept() {
    probe();
    assert!(
        !flushed_here(),
        "probing keeps denormals so that they can be counted"
    );
    tally(
        "here",
        &[&[1.0, f32::from_bits(1)]],
        &[&[f32::MIN_POSITIVE / 4.0, 0.0, 2.0]],
    );
    // Attention over a padded key: its probability is exactly 0, no subnormal.
    let device = Device::flex();
    let scores = Tensor::<4>::from_data(
        TensorData::new(vec![0.5f32, 0.1, 0.3, 0.2], [1, 1, 2, 2]),
        &device,
    );
    let bias = Tensor::<4>::from_data(TensorData::new(vec![0.0f32, -1e4], [1, 1, 1, 2]), &device);
    let p = contrai_kernels::attention_softmax(scores, 0.5, bias);
    let p: Vec<f32> = p.into_data().try_to_vec().unwrap();
    assert_eq!(p, [1.0, 0.0, 1.0, 0.0]);
    let counted = probed();
    let site = |name: &str| counted.iter().find(|(s, _)| *s == name).unwrap().1;
    let here = site("here");
    assert_eq!((here.calls, here.inputs, here.outputs), (1, (2, 1), (3, 1)));
    let softmax = site("softmax");
    assert_eq!((softmax.calls, softmax.outputs), (1, (4, 0)));
    assert!(probed().is_empty(), "read once");
}
