"""GPT-2 small language modelling on OpenWebText: the framework-free pieces.

Every number is in ``spec``, the token files in ``tokens``, the BPE in ``tokenizer``, the
synthetic Markov stream in ``synthetic``, the released checkpoint's layouts in
``checkpoint``, the sources and the conversion in ``sources`` and ``prepare``, the counted
layers in ``flops``. The contract (``WORKLOAD``) comes with the framework backends.
"""
