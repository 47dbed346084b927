"""The tracer in a training framework's hooks: `huggingface.TracerCallback` for
`transformers.Trainer`, `lightning.TracerCallback` for Lightning, and `wandb.WandbSink`.

Each module imports its framework; import the one you use.
"""
