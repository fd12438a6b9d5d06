"""The real profiles shipped with the package: the Pollux (OSDI 2021) artifact's six models.

Data: Apache-2.0, Copyright 2020 Petuum, Inc.; see ``perfmodel/data/pollux/LICENSE`` and NOTICE.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

POLLUX_MODELS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def pollux_traces_dir() -> Path:
    """Folder holding ``<model>/placements.csv``, ``scalability.csv`` and ``validation-<B>.csv``."""
    return Path(str(resources.files("perfmodel") / "data" / "pollux" / "traces"))


def pollux_model_dir(model: str) -> Path:
    """Folder of one shipped model's traces; raises :class:`~perfmodel.errors.InputError`."""
    from perfmodel.errors import InputError

    if model not in POLLUX_MODELS:
        raise InputError(
            f"unknown model '{model}': expected one of {', '.join(POLLUX_MODELS)}"
        )
    return pollux_traces_dir() / model


#: Trainable parameters of each shipped model, from their publications or implementations (the
#: profiles record none); the gradient bytes of :mod:`perfmodel.sync_prior` are these times 4
#: (fp32 gradients, as AdaptDL all-reduced them). Models as the Pollux paper lists them (Qiao
#: et al., OSDI 2021, Table 1).
POLLUX_PARAMETERS: dict[str, int] = {
    # BERT-base fine-tuned on SQuAD: "BERT_BASE (L=12, H=768, A=12, Total Parameters=110M)"
    # (Devlin et al., NAACL 2019, section 3).
    "bert": 110_000_000,
    # ResNet-18 for CIFAR-10 as in kuangliu/pytorch-cifar (AdaptDL's examples/pytorch-cifar
    # trains it): 11,173,962 parameters.
    "cifar10": 11_173_962,
    # DeepSpeech2 as deepspeech.pytorch builds it by default (2 conv layers, 5 bidirectional
    # LSTM layers of 1,024 whose directions are summed, 29 output characters, 161 spectrogram
    # bins): conv 251,168 with batch norm, first LSTM 19,152,896, four more 16,793,600 each,
    # batch norms 10,240, output 29,696 -- 86,618,400. The artifact's exact configuration is not
    # published; a derived figure.
    "deepspeech2": 86_618_400,
    # ResNet-50 (He et al., CVPR 2016), torchvision: 25,557,032 parameters.
    "imagenet": 25_557_032,
    # NeuMF-end on MovieLens-1M (He et al., WWW 2017: 6,040 users, 3,706 items) with AdaptDL's
    # examples/NCF defaults (32 factors, 3 MLP layers): embeddings 9,746 x (32 + 128) =
    # 1,559,360, MLP 256-128-64-32 43,232, output 65 -- 1,602,657.
    "ncf": 1_602_657,
    # YOLOv3 (Redmon and Farhadi, 2018): 61.9M with COCO's 80 classes (ultralytics/yolov3 model
    # table); PASCAL VOC's 20 classes shrink its three 1x1 output convolutions (256, 512 and
    # 1,024 input channels) from 255 to 75 outputs, 322,560 weights and 180 biases fewer.
    "yolov3": 61_577_260,
}
