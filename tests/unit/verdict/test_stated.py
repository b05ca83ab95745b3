"""Issue 41, seventh round: an exception pasted without its frames names no caller; what the log states of its packages
(versions listed, imports and calls in the code shown, the launcher) names the one that requires the callee. Each log
is written for its mechanism (none is a held-out log)."""

from __future__ import annotations

import json

from verdicts import sides

from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.evidence import facts
from envmatrix.verdict.logscan import STATED_HITS, scan_text

SITE = "/opt/conda/lib/python3.10/site-packages"
IMPORT_FAILED = f"ImportError: cannot import name 'is_npu_available' from 'accelerate.utils' ({SITE}/accelerate/utils/__init__.py)\n"
SHARD = "ImportError: cannot import name 'shard_checkpoint' from 'transformers.modeling_utils'\n"


def stated(log: str, *, named: bool = False) -> list[tuple[str, str]]:
    """What the log states, in order; a package only named in the prose where `named`."""
    return [(s.dist, s.how) for s in scan_text(log.encode()).stated if named or s.how != "named"]


def test_versions_are_read_in_the_shapes_users_list_them() -> None:
    log = "\n".join(
        [
            "- **vLLM version**: 0.11.0",
            "transformers==4.46.2",
            "peft-0.5.0",
            "trl版本0.12.0",
            "llama factory 0.9.3.dev0",
            "PyTorch version: 2.8.0",
            "flash_attn                2.7.4.post1        pypi_0    pypi",
            "torchvision 0.20.1",  # another distribution, not torch
            "",
        ]
    )
    assert stated(log) == [
        ("vllm", "version"),
        ("transformers", "version"),
        ("peft", "version"),
        ("trl", "version"),
        ("llamafactory", "version"),
        ("torch", "version"),
        ("flash-attn", "version"),
        ("torchvision", "version"),
    ]


def test_imports_calls_and_launchers_are_read_from_code_not_from_prose() -> None:
    log = "\n".join(
        [
            'the import statement "from peft import PeftModel, PeftConfig" throws',
            "import trl",
            ">>> import deepspeed",
            "model = unsloth.FastLanguageModel.from_pretrained(name)",
            "llamafactory-cli train examples/qwen.yaml",
            "python -m verl.trainer.main_ppo data.train_files=x",
            "RuntimeError: Failed to import transformers.models.auto because of the following error",
            "",
        ]
    )
    assert stated(log) == [("peft", "import"), ("trl", "import"), ("deepspeed", "import"), ("unsloth", "call"), ("llamafactory", "launch"), ("verl", "launch")]


def test_statements_are_bounded_and_each_kept_once() -> None:
    log = "import torch\n" * (STATED_HITS * 4) + "from trl import GRPOTrainer\n"
    assert stated(log) == [("torch", "import")]  # the budget spent on repeats: the read stays bounded on any log


def test_an_import_pasted_alone_is_made_by_the_package_the_code_imports() -> None:
    who, callee, why = sides("My code: from peft import PeftModel, PeftConfig\n\n" + IMPORT_FAILED)
    assert (who, callee) == ("peft", "accelerate")
    assert "peft" in why and "line 1" in why  # peft requires accelerate, and its code imports that very name


def test_the_topmost_of_the_listed_packages_that_require_the_callee_calls_it() -> None:
    log = "transformers 4.49.0\ntrl 0.15.2\npeft 0.14.0\nllamafactory 0.9.2\n\n" + SHARD
    assert sides(log)[:2] == ("llamafactory", "transformers")


def test_two_listed_packages_that_both_call_it_name_neither() -> None:
    log = "transformers 4.49.0\ntrl 0.15.2\npeft 0.14.0\n\n" + SHARD
    assert sides(log)[:2] == ("your code", "transformers")


def test_the_code_shown_counts_before_the_versions_listed() -> None:
    code = "from transformers import AutoModel\nfrom peft import get_peft_model\n\n"
    asked = "AttributeError: 'Mistral3Model' object has no attribute 'prepare_inputs_for_generation'\n"
    log = "transformers 4.49.0\ntrl 0.15.2\npeft 0.14.0\n\n" + code + asked
    assert sides(log)[:2] == ("peft", "transformers")


def test_a_package_the_callee_requires_is_never_its_caller() -> None:
    log = "torch 2.5.1\ntokenizers 0.21.0\n\n" + SHARD
    assert sides(log)[:2] == ("your code", "transformers")


def test_code_that_imports_the_name_itself_is_the_caller() -> None:
    log = "from peft import LoraConfig\nfrom transformers import shard_checkpoint\n\n" + SHARD
    assert sides(log)[:2] == ("your code", "transformers")


def test_frames_printed_name_the_caller_whatever_the_log_states() -> None:
    log = """peft 0.14.0
Traceback (most recent call last):
  File "/home/u/lab/train.py", line 3, in <module>
    from accelerate.utils import is_npu_available
ImportError: cannot import name 'is_npu_available' from 'accelerate.utils'
"""
    assert sides(log)[:2] == ("lab (your code)", "accelerate")


def test_the_verdict_facts_and_evidence_name_the_stated_caller() -> None:
    scan = scan_text(("from peft import PeftModel\n" + IMPORT_FAILED).encode())
    verdict = classify(RunFacts(scan=scan))
    assert verdict.outcome.value == "api_mismatch"
    assert "caller peft, callee accelerate" in verdict.evidence
    shown = json.loads(json.dumps(facts(scan)))["exceptions"][-1]["boundary"]
    assert (shown["caller"], shown["callee"]) == ("peft", "accelerate")
    assert "the log imports peft" in shown["caller_reason"]


def test_pkg_resources_names_the_range_a_distribution_needs_and_who_needs_it() -> None:
    log = (
        "RuntimeError: Failed to import trl.trainer.grpo_trainer because of the following error (look up to see its traceback):\n"
        "The 'accelerate>=1.4.0' distribution was not found and is required by trl\n"
    )
    scan = scan_text(log.encode())
    verdict = classify(RunFacts(scan=scan))
    assert verdict.outcome.value == "api_mismatch", verdict
    assert sides(log)[:2] == ("trl", "accelerate")
    assert "trl says accelerate >=1.4.0 is needed, no installed release satisfies it" in json.dumps(facts(scan)["ranges"])


def test_pkg_resources_version_conflict_names_the_installed_release() -> None:
    log = "pkg_resources.ContextualVersionConflict: (peft 0.15.0 (/usr/lib/python3/dist-packages), Requirement.parse('peft<0.14,>=0.11'), {'swift'})\n"
    scan = scan_text(log.encode())
    assert classify(RunFacts(scan=scan)).outcome.value == "api_mismatch"
    assert facts(scan)["ranges"] == ["swift says peft <0.14,>=0.11 is needed, 0.15.0 is installed"]


def test_a_wrapped_lazy_import_names_the_module_whose_import_checked_the_range() -> None:
    log = (
        "`RuntimeError: Failed to import transformers.models.qwen2.tokenization_qwen2_fast because of the \n"
        "following error (look up to see its traceback):\n"
        "tokenizers>=0.19.1 is required for a normal functioning of this module, but found \n"
        "tokenizers==0.15.0.\n`\n"
    )
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"
    assert sides(log)[:2] == ("transformers", "tokenizers")


def test_a_name_a_release_says_it_removed_is_an_api_mismatch() -> None:
    log = ">>> import somelib\n>>> somelib.OldModel\nAttributeError: 'OldModel' was removed in SomeLib 3.0. Use NewModel instead.\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"
    unversioned = "AttributeError: 'OldModel' was removed.\n"  # no release named: nothing says the installed one removed it
    assert classify(RunFacts(scan=scan_text(unversioned.encode()))).outcome.value == "error"


def test_a_name_error_pasted_without_its_type_in_typographic_quotes_is_read() -> None:
    log = "it results in error:\n```\nname ‘LoraConfig’ is not defined\n```\n"
    verdict = classify(RunFacts(scan=scan_text(log.encode())))
    assert verdict.outcome.value == "missing_module", verdict
    assert "LoraConfig is peft's" in verdict.remedy


def test_batch_schedulers_wall_clock_kills_and_the_container_hooks_driver_refusal() -> None:
    assert classify(RunFacts(scan=scan_text(b"=>> PBS: job killed: walltime 7205 exceeded limit 7200\n"))).outcome.value == "timeout"
    assert classify(RunFacts(scan=scan_text(b"TERM_RUNLIMIT: job killed after reaching LSF run time limit.\n"))).outcome.value == "timeout"
    hook = b"nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer version\n"
    assert classify(RunFacts(scan=scan_text(hook))).outcome.value == "driver_too_old"


def test_a_run_of_one_character_of_any_script_is_judged_as_generated_text() -> None:
    """The scanner's candidate for non-ASCII text is no longer than the run garble.py convicts (CHAR_RUN)."""
    log = "部分截取的输出如下：\n```\n od京" + "低" * 24 + "曝阅.\n```\n"
    verdict = classify(RunFacts(scan=scan_text(log.encode())))
    assert verdict.outcome.value == "garbled_output", verdict
    healthy = "模型输出：今天的天气很好，我们一起去公园散步吧，然后去吃午饭，下午再回家休息一下。\n"
    assert classify(RunFacts(scan=scan_text(healthy.encode()))).outcome.value == "inconclusive"


def test_a_name_missing_from_a_known_library_the_index_does_not_read_is_an_api_mismatch() -> None:
    """The index cannot say whether a release of scipy ever defined a name: a known library's missing name is a mismatch."""
    log = "`cannot import name 'triu' from 'scipy.linalg'`\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"
    own = "cannot import name 'helper' from 'mylab.utils'\n"  # the user's own module: not a release mismatch
    assert classify(RunFacts(scan=scan_text(own.encode()))).outcome.value != "api_mismatch"


def test_a_call_refused_over_its_positional_arguments_is_read_inside_a_sentence() -> None:
    log = "It failed. The error was MyTrainer._get_sampler() takes 1 positional argument but 2 were given. I found a fix.\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"
    missing = "the log said: Engine.step() missing 1 required positional argument: 'batch'\n"
    assert classify(RunFacts(scan=scan_text(missing.encode()))).outcome.value == "api_mismatch"


def test_an_exception_behind_a_chinese_label_is_read() -> None:
    log = "设置 `--packing True`后报错：AttributeError: module 'transformers.models.llama.modeling_llama' has no attribute 'gone_fn'\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"


def test_a_data_loader_worker_segfault_is_a_crash() -> None:
    log = " 0%|          | 0/15 [00:00<?, ?it/s]ERROR: Unexpected segmentation fault encountered in worker.\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "crash"


def test_a_library_asking_a_subclass_of_its_own_class_asks_the_users_code() -> None:
    log = """Traceback (most recent call last):
  File "lab/src/trainer.py", line 167, in train
    engine = deepspeed_init(self, num_training_steps=10)
  File "/opt/conda/lib/python3.8/site-packages/transformers/deepspeed.py", line 267, in trainer_config_finalize
    hidden_size = model.config.hidden_size
  File "/opt/conda/lib/python3.8/site-packages/torch/nn/modules/module.py", line 1207, in __getattr__
    raise AttributeError("'{}' object has no attribute '{}'".format(
AttributeError: 'LabPreTrainedModel' object has no attribute 'config'
"""
    verdict = classify(RunFacts(scan=scan_text(log.encode())))
    assert verdict.outcome.value == "api_mismatch", verdict
    assert "caller transformers, callee your code" in verdict.evidence


def test_inline_code_around_a_pasted_line_is_not_part_of_its_message() -> None:
    log = "it fails with\n`ModuleNotFoundError: No module named 'vllm.model_executor.input_metadata`\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"


def test_a_console_script_where_a_command_starts_states_its_distribution() -> None:
    log = "CUDA_VISIBLE_DEVICES=0,1 NPROC_PER_NODE=2 \\\nswift sft \\\n  --model Qwen/Qwen2.5-7B\n$ vllm serve Qwen/Qwen2.5-7B\n"
    assert stated(log) == [("ms-swift", "launch"), ("vllm", "launch")]
    failed = "AttributeError: module 'transformers.models.qwen2.modeling_qwen2' has no attribute '_flash_attention_forward'\n"
    assert sides("swift sft --model x --packing true\n" + failed)[:2] == ("ms-swift", "transformers")


def test_a_negative_status_is_the_signal_that_killed_the_process() -> None:
    segv = "subprocess.CalledProcessError: Command '['python3', '-u', 'train.py']' died with <Signals.SIGSEGV: 11>.\n"
    assert classify(RunFacts(scan=scan_text(segv.encode()))).outcome.value == "crash"
    assert classify(RunFacts(scan=scan_text(b"After hours of training:\nERROR: error code -9\n"))).outcome.value == "crash"
    assert classify(RunFacts(scan=scan_text(b"worker returned non-zero exit status -8\n"))).outcome.value == "sigfpe"
    assert classify(RunFacts(scan=scan_text(b"the script finished with exit code 0\n"))).outcome.value == "inconclusive"


def test_torch_cpu_allocator_and_old_nccl_warnings() -> None:
    cpu = b"09:21:20.184 ERROR cpu Error: DefaultCPUAllocator: not enough memory: you tried to allocate 6553600 bytes.\n"
    assert classify(RunFacts(scan=scan_text(cpu))).outcome.value == "oom"
    old = b"node1:2231:2231 [0] include/socket.h:344 WARN Socket creation failed : Address family not supported by protocol\n"
    assert classify(RunFacts(scan=scan_text(old))).outcome.value == "nccl_error"
    # NCCL's optional transports and plugins it did without: no failure (it falls back to sockets), and no cover for one
    harmless = b"node1:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n" * 300
    harmless += b"node1:1:1 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot open shared object file\n"
    assert classify(RunFacts(scan=scan_text(harmless))).outcome.value == "inconclusive"
    failed = harmless[:200] + b"node1:1:1 [0] misc/socket.cc:540 NCCL WARN Net : Connection closed by remote peer\n"
    assert classify(RunFacts(scan=scan_text(failed))).outcome.value == "nccl_error"


def test_wrapped_and_typographically_quoted_messages_are_read() -> None:
    path = "(/usr/local/lib/python3.10/dist-packages/transformers/models/llama/modeling_llam\na.py)\n"
    wrapped = "ImportError: cannot import name 'LlamaAttention' from \n'transformers.models.llama.modeling_llama' \n" + path
    assert sides(wrapped)[1] == "transformers"
    curly = "AttributeError: module ‘numpy’ has no attribute ‘float’\n"
    assert sides(curly)[1] == "numpy"
    dotted = "ModuleNotFoundError: No module named 'transformers.models.qwen2_5_vl.'\n"
    assert sides(dotted)[1] == "transformers"


def test_prose_that_starts_with_a_package_name_is_no_command() -> None:
    assert stated("transformers set `self.warnings_issued = {}` in `PreTrainedModel.__init__`\nvllm is great\n") == []
    assert stated("ray start --head --port 6379\n") == [("ray", "launch")]


def test_pkg_resources_exceptions_are_read_as_exceptions() -> None:
    log = "pkg_resources.DistributionNotFound: The 'transformers<4.45,>=4.33' distribution was not found and is required by ms-swift\n"
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"
    assert sides(log)[:2] == ("ms-swift", "transformers")


def test_a_package_named_in_the_prose_counts_last() -> None:
    asked = "AttributeError: 'Qwen2_5_VLAttention' object has no attribute '_flash_attn_uses_top_left_mask'\n"
    assert sides("The original code in `verl` assumed this attribute existed:\n" + asked)[:2] == ("verl", "transformers")
    # a path or a module is no word of the prose
    assert stated("see /opt/verl/trainer.py and verl.trainer.main_ppo\n", named=True) == []
    assert stated("We use verl, with trl.\n", named=True) == [("verl", "named"), ("trl", "named")]
    # a version listed outranks a word: trl is listed, verl only named
    assert sides("trl 0.19.1\nWe moved from verl to trl.\n" + asked)[:2] == ("trl", "transformers")


def test_labels_bold_types_and_servers_answers_around_a_message() -> None:
    label = "With pytorch_lightning 1.7 : ModuleNotFoundError: No module named 'pytorch_lightning.metrics'\n"
    assert sides(label)[1] == "pytorch-lightning"
    bold = "**ImportError:** cannot import name 'create_repo' from 'huggingface_hub' (C:\\Anaconda3\\lib\\site-packages\\huggingface_hub\\__init__.py)\n"
    assert sides(bold)[1] == "huggingface-hub"
    server = "Error code: 400 - {'message': \"Unexpected keyword argument 'best_of'\", 'object': 'error'}\n"
    assert classify(RunFacts(scan=scan_text(server.encode()))).outcome.value == "api_mismatch"


def test_shell_padding_an_oom_killer_in_words_and_a_config_key() -> None:
    padded = b"./run.sh: line 184: 2324239 Aborted                 (core dumped) python train.py\n"
    assert classify(RunFacts(scan=scan_text(padded))).outcome.value == "crash"
    assert classify(RunFacts(scan=scan_text(b"When I run the train code, I get: killed by OOM killer\n"))).outcome.value == "oom"
    # the OOM killer among the causes a notice lists as possible is no evidence by itself, however long the line
    ray = "(raylet) A worker died or was killed while executing a task by an unexpected system error. " + "x" * 500
    ray += " Some common causes include: (1) the process was killed by the OOM killer due to high memory usage\n"
    assert classify(RunFacts(scan=scan_text(ray.encode()))).outcome.value == "crash"
    key = b"KeyError: <class 'transformers.models.table_transformer.configuration_table_transformer.TableTransformerConfig'>\n"
    assert classify(RunFacts(scan=scan_text(key))).outcome.value == "unknown_model"
    bnb = b"RuntimeError: \n        CUDA Setup failed despite GPU being available. Please run the following command\n"
    assert classify(RunFacts(scan=scan_text(bnb))).outcome.value == "import_abi"


def test_a_message_glued_to_chinese_text_keeps_its_callable() -> None:
    log = "在DPO模式下可能报DPOTrainer.get_batch_logps() got an unexpected keyword argument 'average_log_prob'这个错误，LLaMaFactory源码里有问题\n"
    assert sides(log)[:2] == ("llamafactory", "trl")


def test_signals_and_memory_in_more_runtimes_words() -> None:
    cases = {
        b"$ Torch: not enough memory: you tried to allocate 0GB. Buy new RAM! at /torch/lib/TH/THGeneral.c:210\n": "oom",
        b"DataLoader worker (pid 2287) is killed by signal: Killed.\n": "crash",
        b'*** Aborted at 1525421992 (unix time) try "date -d @1525421992" if you are using GNU date ***\n': "crash",
        b"*** SIGSEGV (@0x19) received by PID 11091 (TID 0x7f813c844700) from PID 25; stack trace: ***\n": "crash",
    }
    for log, outcome in cases.items():
        assert classify(RunFacts(scan=scan_text(log))).outcome.value == outcome, log


def test_non_finite_values_a_check_raised_in_more_words() -> None:
    assert classify(RunFacts(scan=scan_text(b"ValueError:Network outputs is NAN! Stop Training\n"))).outcome.value == "nan_loss"
    frame = b'Traceback (most recent call last):\n  File "/x/fp16_optimizer.py", line 189, in clip_grad_norm\n    raise FloatingPointError(m)\n'
    fp = frame + b"FloatingPointError: Minimum loss scale reached (0.0001).\n"
    assert classify(RunFacts(scan=scan_text(fp))).outcome.value == "nan_loss"
    tok = b"ValueError: Tokenizer class Qwen2Tokenizer does not exist or is not currently imported.\n"
    assert classify(RunFacts(scan=scan_text(tok))).outcome.value == "unknown_model"


def test_an_environment_inside_a_checkout_names_the_program_that_ran() -> None:
    site = "/home/team/code/sglang/venv/lib/python3.10/site-packages/transformers/models/mllama/image_processing_mllama.py"
    log = f"ImportError: cannot import name 'is_valid_list_of_images' from 'transformers.models.mllama.image_processing_mllama' ({site})\n"
    assert sides(log)[:2] == ("sglang", "transformers")
    plain = log.replace("/home/team/code/sglang/venv/", "/opt/venv/")
    assert sides(plain)[:2] == ("your code", "transformers")


def test_a_module_constant_is_a_name_the_index_knows() -> None:
    log = "cannot import name 'ALL_LAYERNORM_LAYERS' from 'transformers.trainer'\n"  # a constant, removed from trainer's namespace
    assert classify(RunFacts(scan=scan_text(log.encode()))).outcome.value == "api_mismatch"


def test_an_import_without_from_is_read_from_the_statement_printed_above() -> None:
    log = """Traceback (most recent call last):
  File "convert.py", line 27, in <module>
    from transformers.modeling_utils import (shard_checkpoint,
ImportError: cannot import name 'shard_checkpoint'
"""
    assert sides(log)[:2] == ("your code", "transformers")


def test_a_range_with_no_installed_release_is_advised_without_one() -> None:
    log = "pkg_resources.DistributionNotFound: The 'transformers<4.45,>=4.33' distribution was not found and is required by ms-swift\n"
    remedy = classify(RunFacts(scan=scan_text(log.encode()))).remedy
    assert "no installed release satisfies it" in remedy and "supports ;" not in remedy and ";  is" not in remedy, remedy
