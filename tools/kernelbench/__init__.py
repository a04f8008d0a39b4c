"""KernelBench problem files into leap task folders (tools/kernelbench_import.py is the command).

Modules, in the order a problem goes through them:
- source: finding problem files, their size symbols and literals, loading them;
- problem: a problem's Model and inputs at given sizes, its analysis on the meta device;
- sizes: the search for smaller values of the size symbols;
- values: fixed values as seeded distributions or files;
- tracing: TorchScript tracing helpers and the checks read from one run;
- convert: one problem into a task folder, as named steps (convert_at);
- isolation: each problem in its own forked process under memory and time limits;
- resume: which records of an earlier import are kept;
- cli: the command line and the problem loop.
docs/kernelbench.md describes what the import does and why.
"""
