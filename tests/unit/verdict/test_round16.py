"""Issue 41, twenty-ninth round: a CUDA call that failed under NCCL is judged by CUDA's code; Cython's size check of any
compiled type and torch's refusal of a second operator registration are builds that do not match. Each log is written
for its mechanism; none is a held-out log."""

from __future__ import annotations

from verdicts import sides, verdict

from envmatrix.facts import errorcodes


def test_nccl_reporting_a_failed_cuda_call_is_judged_by_the_cuda_code_it_names() -> None:
    line = "host-3:2211:2290 [1] include/alloc.h:124 NCCL WARN Cuda failure {} '{}'"
    assert verdict(line.format(700, "an illegal memory access was encountered")) == "crash"
    assert verdict(line.format(2, "out of memory")) == "oom"
    # the older NCCL prints the message without the number
    assert verdict("node1:77:90 [0] NCCL WARN Cuda failure 'out of memory'") == "oom"
    assert [c.name for c in errorcodes.find("NCCL WARN Cuda failure 719 'unspecified launch failure'")] == ["cudaErrorLaunchFailure"]
    # NCCL's own failures stay NCCL's
    assert verdict("node1:77:90 [0] NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129") == "nccl_error"


def test_cythons_size_check_of_any_compiled_type_is_a_build_for_another_release() -> None:
    for kind in ("numpy.ndarray", "numpy.dtype", "sklearn.tree._tree.Tree", "pandas._libs.interval.Interval"):
        message = f"ValueError: {kind} size changed, may indicate binary incompatibility. Expected 96 from C header, got 88 from PyObject"
        assert verdict(f'  File "x.pyx", line 1, in init x\n{message}') == "import_abi", kind


def test_a_second_registration_of_an_operator_under_another_schema_is_two_builds_in_one_process() -> None:
    log = (
        '  File "/opt/venv/lib/python3.9/site-packages/torch/__init__.py", line 199, in <module>\n'
        "    from torch._C import *\n"
        "ImportError: Tried to register multiple operators with the same name and the same overload name but different schemas:"
        " aten::add.Tensor(Tensor self, Tensor other) vs aten::add.Tensor(Tensor self)\n"
    )
    assert verdict(log) == "import_abi"
    assert (
        verdict("RuntimeError: Tried to register an operator (myops::scale(Tensor x) -> Tensor) with the same name and overload name multiple times.")
        == "import_abi"
    )


def test_a_cuda_failure_nccl_reports_after_its_own_network_failure_is_the_consequence() -> None:
    network = "h2:51:60 [0] transport/net_ib.cc:1200 NCCL WARN NET/IB : Got completion from peer 10.0.0.3 with error 12, opcode 1, len 0, vendor err 129\n"
    cuda = "h2:51:51 [1] init.cc:300 NCCL WARN Cuda failure 'an illegal memory access was encountered'\n"
    assert verdict(network + cuda) == "nccl_error"
    assert verdict(cuda + network) == "crash"


def test_positional_arguments_refused_alongside_keyword_only_ones_are_the_same_call_mismatch() -> None:
    message = "spectrum() takes 0 positional arguments but 1 positional argument (and 1 keyword-only argument) were given"
    assert verdict(message) == "api_mismatch"  # printed alone, as a logger or a user quotes it
    assert verdict(f'Traceback (most recent call last):\n  File "a.py", line 3, in <module>\n    spectrum(x, sr=16000)\nTypeError: {message}') == "api_mismatch"


def test_a_keyword_no_code_can_spell_is_data_passed_as_keywords_not_a_dropped_argument() -> None:
    assert verdict("TypeError: __init__() got an unexpected keyword argument 'sample-01.h5'") == "error"
    assert verdict("TypeError: __init__() got an unexpected keyword argument 'sample_01'") == "api_mismatch"
    # a keyword retold with its value is still a keyword
    assert verdict("TypeError: init() got an unexpected keyword argument 'max_norm=1.0'") == "api_mismatch"


def test_an_import_error_a_wrapper_prints_under_its_traceback_is_imported_where_the_wrapper_caught_it() -> None:
    log = (
        '  File "/opt/conda/lib/python3.11/site-packages/torch/_inductor/runtime/hints.py", line 30, in <module>\n'
        "    from triton.backends.compiler import AttrsDescriptor\n"
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
        "LoweringException: ImportError: cannot import name 'AttrsDescriptor' from 'triton.backends.compiler' "
        "(/opt/conda/lib/python3.11/site-packages/triton/backends/compiler.py)\n"
    )
    assert verdict(log) == "api_mismatch"
    assert sides(log)[:2] == ("torch", "triton")


def test_version_checks_in_more_words_state_the_range_each_side_needs() -> None:
    jax = "RuntimeError: jaxlib is version 0.1.60, but this version of jax requires version >= 0.2.0."
    assert verdict(jax) == "api_mismatch" and sides(jax)[:2] == ("jax", "jaxlib")
    trace = 'Traceback (most recent call last):\n  File "run.py", line 2, in <module>\n    import pointlib.torch\n'
    needs = trace + "Exception: Version mismatch: PointLib needs PyTorch version 2.1.*, but version 2.4.0 is installed!"
    assert verdict(needs) == "api_mismatch"


def test_gyms_environment_checker_refusing_an_old_api_reset_is_the_step_api_mismatch() -> None:
    log = "AssertionError: The result returned by `env.reset()` was not a tuple of the form `(obs, info)`, where `obs` is a observation"
    assert verdict(log) == "api_mismatch"


def test_a_loss_told_going_nan_with_words_between_or_into_nan_and_training_returning_nan() -> None:
    assert verdict("The reconstruction loss of the second stage becomes nan after a few epochs.") == "nan_loss"
    assert verdict("after 30 batches the loss goes into NaN") == "nan_loss"
    assert verdict("With fp16 the training began to return nan after 200 iterations.") == "nan_loss"
    # a loss that is fine, and NaN said of no loss, are not
    assert verdict("The loss is fine; I only want to know how to log the learning rate.") != "nan_loss"
