"""``edge-verl doctor``'s GPU-stack report and the requirement walk of ``MODE=image scripts/setup_gpu.sh``.

Both are pure functions over injected look-ups (installed versions, importable modules, Requires-Dist), so
these cases describe machines this project's CI does not have: an H200 node with verl's stacks in their
broken and working states.
"""

from edge_verl.gpu_stack import (
    CudaInfo,
    belongs_to_image_gpu_stack,
    describe_gpu_stack,
    find_unmet_requirements,
)

H200_NODE = CudaInfo("2.11.0+cu130", "13.0", ("NVIDIA H200",) * 8)
FSDP_INSTALL = {"vllm": "0.24.0", "flash-attn": "2.8.3", "mbridge": "0.15.1"}
MEGATRON_INSTALL = {
    **FSDP_INSTALL,
    "megatron-core": "0.18.0",
    "megatron-bridge": "0.5.1",
    "transformer-engine": "2.16.1",
    "apex": "0.1",
}
BUILT_EXTENSIONS = {"transformer_engine_torch", "amp_C"}


def describe(cuda, versions, modules=BUILT_EXTENSIONS):
    return describe_gpu_stack(cuda, versions.get, modules.__contains__)


def test_a_machine_without_a_gpu_gets_one_line_whatever_is_installed():
    cpu_torch = CudaInfo("2.13.0+cpu", None, ())
    assert describe(cpu_torch, MEGATRON_INSTALL) == [
        "GPU: none visible (torch 2.13.0+cpu, a CPU build); GPU stack not checked"
    ]
    # a CUDA build of torch on a node whose driver shows no device says which CUDA it expected
    assert describe(CudaInfo("2.11.0", "13.0", ()), {}) == [
        "GPU: none visible (torch 2.11.0, built for CUDA 13.0); GPU stack not checked"
    ]


def test_an_fsdp_node_lists_vllm_and_flash_attn_and_points_to_the_megatron_set_up():
    assert describe(H200_NODE, FSDP_INSTALL) == [
        "GPU: 8 x NVIDIA H200; torch 2.11.0+cu130, built for CUDA 13.0",
        "  vllm 0.24.0",
        "  flash-attn 2.8.3",
        "  megatron: not installed (BACKEND=megatron PYTHON=python3.12 bash scripts/setup_gpu.sh)",
    ]


def test_a_missing_package_names_what_installs_it():
    # pip install '.[gpu]' alone: flash-attn is no longer in any extra (pip cannot build it in isolation)
    lines = describe(H200_NODE, {"vllm": "0.24.0"})
    assert lines[2] == "  flash-attn: missing (bash scripts/setup_gpu.sh builds it against torch, --no-build-isolation)"


def test_a_megatron_node_lists_each_megatron_package():
    assert describe(H200_NODE, MEGATRON_INSTALL)[3:] == [
        "  megatron-core 0.18.0",
        "  megatron-bridge 0.5.1",
        "  mbridge 0.15.1",
        "  transformer-engine 2.16.1",
        "  apex 0.1",
    ]


def test_transformer_engine_without_its_extension_and_pypis_apex_are_called_out():
    # what the old gpu-megatron extra installed: 'transformer-engine' with no extra, and PyPI's unrelated 'apex'
    lines = describe(H200_NODE, {**MEGATRON_INSTALL, "apex": "0.9.10dev"}, modules=set())
    assert lines[6].startswith("  transformer-engine 2.16.1 without its PyTorch extension: NVTE_PYTORCH_FORCE_BUILD=TRUE")
    assert lines[6].endswith("-c requirements/gpu-megatron.txt transformer-engine-torch")
    assert lines[7].startswith("  apex 0.9.10dev is not NVIDIA's apex (no amp_C; PyPI's 'apex' is another project)")


def test_mixed_devices_are_counted_per_name():
    mixed = CudaInfo("2.11.0+cu130", "13.0", ("NVIDIA H200", "NVIDIA H200", "NVIDIA L40S"))
    assert describe(mixed, FSDP_INSTALL)[0] == "GPU: 2 x NVIDIA H200, 1 x NVIDIA L40S; torch 2.11.0+cu130, built for CUDA 13.0"


# A small installed world in the shape of verl's image: verl absent (its Dockerfile uninstalls it),
# transformers older than verl's range, torch with a pin the image overrides on purpose.
REQUIRES = {
    "edge-verl": ["torch>=2.6", "verl[verl-core]==0.9.1", "pytest>=8; extra == 'test'", "colorama; extra == 'gpu'"],
    "verl": [
        "transformers>=5.5.3,!=5.6.0,<5.11",
        "TransferQueue>=0.1.10; extra == 'verl-core'",
        "tomli; python_version < '3.0'",
    ],
    "torch": ["nvidia-nccl-cu13==2.28.9"],
    "pytest": ["pluggy>=1.5"],
    "transformers": ["huggingface-hub>=1.0"],
}


def walk(installed, root="edge-verl[test]"):
    return find_unmet_requirements(root, lambda name: REQUIRES.get(name, []), installed.get, belongs_to_image_gpu_stack)


def test_the_walk_reports_what_is_missing_or_out_of_range_and_leaves_the_gpu_stack_alone():
    image = {"edge-verl": "0.1.0", "torch": "2.11.0+cu130", "nvidia-nccl-cu13": "2.29.7", "pytest": "8.3.0",
             "pluggy": "1.5.0", "transformers": "5.3.0"}
    # verl is missing, so its requirements are not walked yet; NCCL 2.29.7 breaks torch's pin but is the image's
    assert walk(image) == ["verl==0.9.1"]
    with_verl = {**image, "verl": "0.9.1"}
    # verl's base requirement and its verl-core extra; tomli's marker is false, colorama's extra not asked for
    assert walk(with_verl) == ["transferqueue>=0.1.10", "transformers!=5.6.0,<5.11,>=5.5.3"]
    fixed = {**with_verl, "transferqueue": "0.1.10", "transformers": "5.9.0"}
    # the next round walks into what the last one installed
    assert walk(fixed) == ["huggingface-hub>=1.0"]
    assert walk({**fixed, "huggingface-hub": "1.2.0"}) == []


def test_only_the_extras_asked_for_are_walked():
    installed = {"edge-verl": "0.1.0", "verl": "0.9.1", "transferqueue": "0.1.10", "transformers": "5.9.0",
                 "huggingface-hub": "1.2.0"}
    assert walk(installed) == ["pytest>=8"]
    assert walk(installed, "edge-verl[gpu,test]") == ["colorama", "pytest>=8"]
    assert walk(installed, "edge-verl") == []


def test_requirements_on_one_name_from_two_places_are_merged():
    requires = {"root": ["a", "c"], "a": ["b>=1"], "c": ["b<3"]}
    installed = {"root": "1", "a": "1", "c": "1"}
    unmet = find_unmet_requirements("root", lambda name: requires.get(name, []), installed.get, lambda name: False)
    assert unmet == ["b<3,>=1"]


def test_the_lab_is_walked_beside_the_plugin():
    # MODE=image: the plugin with its extras and the lab (a distribution of its own, lab/pyproject.toml) at once
    requires = {**REQUIRES, "edge-verl-lab": ["edge-verl==0.1.0", "matplotlib>=3.7"]}
    installed = {"edge-verl": "0.1.0", "edge-verl-lab": "0.1.0", "verl": "0.9.1", "transferqueue": "0.1.10",
                 "transformers": "5.9.0", "huggingface-hub": "1.2.0"}
    unmet = find_unmet_requirements(
        ["edge-verl[test]", "edge-verl-lab"], lambda name: requires.get(name, []), installed.get, belongs_to_image_gpu_stack
    )
    assert unmet == ["matplotlib>=3.7", "pytest>=8"]
