"""The KernelBench converter's named steps (tools/kernelbench/convert.py), one at a time, on small
problems written here: what each step decides, checked against values computed independently
(eager PyTorch on the same problem, the shapes written by hand). Run by ctest through the
project's Python: python -m unittest discover -s tests/python."""
import argparse
import math
import os
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from kernelbench.common import Skip, task_name  # noqa: E402
from kernelbench.convert import Conversion, convert_at, shape_text  # noqa: E402
from kernelbench.source import base_symbols, load_module, module_ints, source_literals  # noqa: E402

LINEAR = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x)) * 2.0


batch_size = 64
features = 96


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''

RANDOM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.5, training=True)


n = 128


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
'''

LAYER_NORM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.ln = nn.LayerNorm(features)
        self.bn = nn.BatchNorm1d(features)
        self.register_buffer("scale", torch.ones(features))

    def forward(self, x):
        return self.bn(self.ln(x)) * self.scale


batch_size = 32
features = 64


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''

SQRT_WEIGHT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x * torch.sqrt(self.p) + x


n = 128


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return [n]
'''


def options(**kw):
    o = argparse.Namespace(seed=42, atol=1e-4, rtol=1e-4, timeout=300.0, memory_gb=4.0, cpu_ms=100.0, threads=1)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


class ConverterSteps(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def problem(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_each_step_of_a_linear_problem(self):
        path = self.problem("7_LinearRelu.py", LINEAR)
        c = Conversion(1, 7, path, options(), 1.0, None, None)
        # 1. the meta analysis: KernelBench's shapes, nothing allocated
        c.analyse_full_size()
        self.assertEqual(list(c.full_a["inputs"]), [(64, 96)])
        self.assertEqual(list(c.full_a["outputs"]), [(64, 96)])
        # 2. small enough: traced at KernelBench's sizes
        c.choose_trace_sizes()
        self.assertIsNone(c.trace_over)
        c.build_traced_problem()
        self.assertEqual(c.info["traced_at"], "kernelbench")
        # 3. nn.Linear's kaiming-uniform weight and bias: a seeded uniform rule of bound 1/sqrt(96)
        c.choose_value_rules()
        self.assertEqual(set(c.rules), {"linear.weight", "linear.bias"})
        for k in ("linear.weight", "linear.bias"):
            kind, lo, hi = c.rules[k]
            self.assertEqual(kind, "uniform")
            self.assertAlmostEqual(hi, 1 / math.sqrt(96), delta=0.01)
            self.assertAlmostEqual(lo, -hi)
        # the values used are the seeded draws, not the Model's own
        self.assertFalse(torch.equal(c.state["linear.weight"], c.T.state["linear.weight"]))
        # forward on those values: relu(x W^T + b) * 2, computed here independently
        c.check_forward()
        x = c.tensors[0]
        expected = torch.relu(x @ c.state["linear.weight"].T + c.state["linear.bias"]) * 2.0
        torch.testing.assert_close(c.out1[0], expected)
        # the trace reads both values and agrees with forward
        c.trace_reference()
        self.assertEqual(c.keys, ["linear.weight", "linear.bias"])
        c.check_trace()
        torch.testing.assert_close(c.ref_out[0], expected)
        # 4. every dimension named by its size symbol
        c.symbolic_shapes()
        self.assertEqual(c.exprs, [["batch_size", "features"], ["features", "features"], ["features"],
                                   ["batch_size", "features"]])
        self.assertEqual(c.used_symbols, {"batch_size": 64, "features": 96})
        self.assertEqual(c.eval_shapes({"batch_size": 3, "features": 5}), [(3, 5), (5, 5), (5,), (3, 5)])
        # 5. a tiny reference needs no smaller cpu sizes
        c.find_cpu_sizes()
        self.assertIsNone(c.C)
        c.find_strict_inputs()
        self.assertEqual(c.strict, set())  # relu needs no input domain
        # 6. the folder
        task, info = c.write_task(self.dir.name)
        self.assertEqual(task, "l1_007_linear_relu")
        text = open(os.path.join(self.dir.name, task, "task.yaml"), encoding="utf-8").read()
        self.assertIn("sizes: {batch_size: 64, features: 96}", text)
        self.assertIn("  x: {dtype: float32, shape: [batch_size, features]", text)
        self.assertIn("shape: [features, features], init: {uniform:", text)
        self.assertIn("  out: {dtype: float32, shape: [batch_size, features]}", text)
        self.assertTrue(os.path.isfile(os.path.join(self.dir.name, task, "reference.pt")))
        self.assertFalse([n for n in os.listdir(self.dir.name) if n.startswith(".tmp-")])  # nothing half-written
        # the saved reference computes forward
        ref = torch.jit.load(os.path.join(self.dir.name, task, "reference.pt"))
        torch.testing.assert_close(ref(x, c.state["linear.weight"], c.state["linear.bias"]), expected)

    def test_a_value_two_size_symbols_share_names_each_dim_by_its_own_symbol(self):
        # batch_size = features = 64: every 64 was named batch_size, the weight [batch_size, batch_size]
        path = self.problem("7_LinearRelu.py", LINEAR.replace("features = 96", "features = 64"))
        c = Conversion(1, 7, path, options(), 1.0, None, None)
        c.analyse_full_size()
        c.choose_trace_sizes()
        c.build_traced_problem()
        c.choose_value_rules()
        c.check_forward()
        c.trace_reference()
        c.check_trace()
        c.symbolic_shapes()
        self.assertEqual(c.exprs, [["batch_size", "features"], ["features", "features"], ["features"],
                                   ["batch_size", "features"]])
        self.assertEqual(c.used_symbols, {"batch_size": 64, "features": 64})
        self.assertEqual(c.untie_groups, [["batch_size", "features"]])
        # at the cpu sizes the two differ, so a kernel that swaps them is caught there
        c.find_cpu_sizes()
        self.assertEqual(c.cpu_over, {"batch_size": 64, "features": 32})
        self.assertEqual(c.info["cpu_untied"], "batch_size,features")
        x = c.C.tensors[0]
        self.assertEqual(tuple(x.shape), (64, 32))
        w = c.weights_for(c.C)
        self.assertEqual(tuple(w["linear.weight"].shape), (32, 32))
        expected = torch.relu(x @ w["linear.weight"].T + w["linear.bias"]) * 2.0
        got = c.traced(x.clone(), w["linear.weight"], w["linear.bias"])
        torch.testing.assert_close(got, expected)

    def test_a_random_forward_is_skipped_at_the_forward_check(self):
        path = self.problem("3_Dropout.py", RANDOM)
        c = Conversion(1, 3, path, options(), 1.0, None, None)
        c.analyse_full_size()
        c.choose_trace_sizes()
        c.build_traced_problem()
        c.choose_value_rules()
        with self.assertRaises(Skip) as e:
            c.check_forward()
        self.assertIn("not deterministic", str(e.exception))
        # convert_at runs the same steps: the same reason, and no folder
        with self.assertRaises(Skip):
            convert_at(1, 3, path, self.dir.name, options(), 1.0)
        self.assertEqual([n for n in os.listdir(self.dir.name) if not n.endswith(".py")], [])

    def test_constant_parameters_are_spread_and_buffers_kept(self):
        # KernelBench's norm layers start at weight 1, bias 0 on every seed: an answer that ignored
        # the affine part passed (a tester, 2026-12-07). Parameters are drawn around their value.
        path = self.problem("40_LayerNorm.py", LAYER_NORM)
        c = Conversion(1, 40, path, options(), 1.0, None, None)
        c.analyse_full_size()
        c.choose_trace_sizes()
        c.build_traced_problem()
        c.choose_value_rules()
        self.assertEqual(c.rules["ln.weight"], ("uniform", 0.5, 1.5))
        self.assertEqual(c.rules["ln.bias"], ("uniform", -0.5, 0.5))
        self.assertEqual(c.rules["bn.weight"], ("uniform", 0.5, 1.5))
        self.assertEqual(c.rules["bn.bias"], ("uniform", -0.5, 0.5))
        self.assertEqual(c.rules["scale"], ("normal", 1.0, 0.0))  # a buffer: as KernelBench has it
        w = c.state["ln.weight"]
        self.assertGreater(float(w.std()), 0.1)
        self.assertTrue(bool(((w >= 0.5) & (w <= 1.5)).all()))
        # forward on those values, computed here independently (training-mode batch norm: batch statistics)
        c.check_forward()
        x = c.tensors[0]
        ln = torch.nn.functional.layer_norm(x, (64,), c.state["ln.weight"], c.state["ln.bias"])
        mean, var = ln.mean(0), ln.var(0, unbiased=False)
        expected = (ln - mean) / torch.sqrt(var + 1e-5) * c.state["bn.weight"] + c.state["bn.bias"]
        torch.testing.assert_close(c.out1[0], expected, rtol=1e-4, atol=1e-4)

    def test_a_spread_that_makes_nan_falls_back_to_the_constant(self):
        path = self.problem("9_SqrtWeight.py", SQRT_WEIGHT)
        c = Conversion(1, 9, path, options(), 1.0, None, None)
        c.analyse_full_size()
        c.choose_trace_sizes()
        c.build_traced_problem()
        c.choose_value_rules()
        self.assertEqual(c.rules["p"], ("uniform", -0.5, 0.5))
        c.check_forward()  # sqrt of negative weights: NaN, so the zeros come back
        self.assertEqual(c.rules["p"], ("normal", 0.0, 0.0))
        self.assertTrue(bool(torch.isfinite(c.out1[0]).all()))
        torch.testing.assert_close(c.out1[0], c.tensors[0])

    def test_level_4_is_out_of_scope(self):
        with self.assertRaises(Skip) as e:
            convert_at(4, 1, self.problem("1_X.py", LINEAR), self.dir.name, options(), 1.0)
        self.assertIn("level 4", str(e.exception))

    def test_a_list_of_sizes_is_sizes_like_a_tuple(self):
        # 3_MLP's `layer_sizes = [16384, 16384]` was no size at all: a 1-GiB weight at the cpu sizes.
        src = "layer_sizes = [400, 800]\nshape = (3, 5)\nn = 7\n" \
              "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\nclass Model:\n    pass\n"
        self.assertEqual(base_symbols(src), {"layer_sizes_0": 400, "layer_sizes_1": 800, "shape_0": 3, "shape_1": 5,
                                             "n": 7})
        path = self.problem("1_S.py", src)
        mod = load_module(path, src, {"layer_sizes_1": 16, "shape_0": 2})
        self.assertEqual(mod.layer_sizes, [400, 16])
        self.assertEqual(mod.shape, (2, 5))
        self.assertEqual(module_ints(mod), {"layer_sizes_0": 400, "layer_sizes_1": 16, "shape_0": 2, "shape_1": 5,
                                            "n": 7})

    def test_a_repeated_list_of_sizes_is_one_size_per_element(self):
        # 3_DeepNarrowMLP's `hidden_layer_sizes = [1024] * 16` was no size: its 16 weights kept
        # 1024 x 1024 at the cpu sizes, and the 1024 and 16 counted as divisors of the problem.
        src = "hidden = [1024] * 16\npair = 3 * (8, 6)\nn = 4096\nm = 2 * 3\n" \
              "def get_inputs():\n    return []\ndef get_init_inputs():\n    return []\nclass Model:\n    pass\n"
        self.assertEqual(base_symbols(src), {"hidden_0": 1024, "pair_0": 8, "pair_1": 6, "n": 4096, "m": 6})
        self.assertEqual(source_literals(src), set())  # the sizes' own literals are no divisors
        path = self.problem("1_R.py", src)
        mod = load_module(path, src, {"hidden_0": 64, "pair_1": 2})
        self.assertEqual(mod.hidden, [64] * 16)
        self.assertEqual(mod.pair, (8, 2) * 3)
        ints = module_ints(mod)
        self.assertEqual({ints[f"hidden_{i}"] for i in range(16)}, {64})

    def test_task_names_keep_acronyms_and_dimensions_whole(self):
        names = {"19_ReLU.py": "l1_019_relu", "20_LeakyReLU.py": "l1_020_leaky_relu", "26_GELU_.py": "l1_026_gelu",
                 "42_Max_Pooling_2D.py": "l1_042_max_pooling_2d", "4_LeNet5.py": "l1_004_lenet5",
                 "8_ResNetBasicBlock.py": "l1_008_resnet_basic_block", "1_Conv2D_ReLU_BiasAdd.py": "l1_001_conv2d_relu_bias_add",
                 "10_3D_tensor_matrix_multiplication.py": "l1_010_3d_tensor_matrix_multiplication",
                 "88_MinGPTNewGelu.py": "l1_088_min_gpt_new_gelu", "35_LSTMBidirectional.py": "l1_035_lstm_bidirectional",
                 "50_conv_standard_2D__square_input__square_kernel.py": "l1_050_conv_standard_2d_square_input_square_kernel",
                 "28_HardSigmoid.py": "l1_028_hard_sigmoid", "7_Matmul_with_small_K_dimension_.py":
                     "l1_007_matmul_with_small_k_dimension"}
        for f, want in names.items():
            self.assertEqual(task_name(1, os.path.join("/x", f)), want)

    def test_shape_text(self):
        self.assertEqual(shape_text(["N", "2 * H", "3"]), "[N, 2 * H, 3]")
        self.assertEqual(shape_text([]), "[]")


if __name__ == "__main__":
    unittest.main()
