"""The kernels' C entry points and instruction sets, the one place they are written.

Plain data with no imports (as ``_typetable.py``), so that the build reads it
without numpy.  ``tools/gen_kernels.py`` (run by ``setup.py``) writes from it
the public header ``extql/src/extql_kernels.h``, the prototypes each
instruction set's copy of the kernels is compiled against
(``extql_unit.h``), and the functions that forward each entry point to the
copy the CPU runs (``extql_dispatch.c``); ``setup.py`` reads the instruction
sets' compiler flags.  The kernels that define the entry points are in
``extql/kernels/`` (the dispatch unit).
"""

#: The instruction sets the dispatch unit is compiled for, in order of
#: preference from the last: name, GCC / Clang flags, the CPU features
#: (``__builtin_cpu_supports`` names) a CPU must have to run it.  The first
#: is the baseline every CPU of the platform runs (no flags).
ISAS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("baseline", (), ()),
    ("avx2", ("-mavx2", "-mfma", "-mf16c"), ("avx2", "fma", "f16c")),
    ("avx512",
     ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma", "-mf16c",
      "-mprefer-vector-width=512"),
     ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma", "f16c")),
)

#: The entry points: name (without the ``extql_`` prefix), whether each
#: instruction set has its own copy (else the baseline's serves all), the C
#: return type, the parameters, and what it does (the header's comment).
#: Element types are ONNX ``TensorProto.DataType`` codes; tensors are dense
#: and C-contiguous, seen as [outer, D, inner] with D the quantized axis
#: (per tensor: D = 1, inner = n); each function works on elements
#: [start, stop), so a caller splits a tensor among threads.
ENTRY_POINTS: tuple[tuple[str, bool, str, tuple[str, ...], str], ...] = (
    ("quantize_range", True, "int",
     ("int qtype", "int xtype", "int prec", "const void *x", "const float *scale",
      "const void *zero_point", "void *y", "int64_t D", "int64_t inner", "int64_t block",
      "int64_t start", "int64_t stop", "int flags"),
     """Quantize elements [start, stop) of x (xtype: EXTQL_FLOAT32, EXTQL_FLOAT16,
EXTQL_BFLOAT16, or EXTQL_INT32, rounded to nearest even into float32 first) into y of
the type qtype.  The division is in the precision prec (EXTQL_FLOAT32, EXTQL_FLOAT16 or
EXTQL_BFLOAT16: x rounded to prec, divided, the quotient rounded to prec; the scale
must already be a value of prec: extql_convert_scales).  Per tensor or per axis
(block 0): element i uses scale[(i / inner) % D]; blocked (block > 0) along D in blocks
of `block`: the scale and zero point are dense [outer, ceil(D / block), inner].  A
NULL zero point means 0.  A sub-byte type (int4, uint4, int2, uint2) or float4e2m1 is
packed (ONNX's layout) unless flags has EXTQL_UNPACKED; its zero point is given as
extql_unpack gives it, and start must be a multiple of the elements per byte (stop
too unless it is the tensor's end).  Returns 0, or -1 for an unknown code."""),
    ("dequantize_range", True, "int",
     ("int qtype", "int ytype", "const void *x", "const float *scale",
      "const void *zero_point", "void *y", "int64_t D", "int64_t inner", "int64_t block",
      "int64_t start", "int64_t stop", "int flags"),
     """Dequantize elements [start, stop) of x (type qtype) into y (ytype: EXTQL_FLOAT32,
EXTQL_FLOAT16 or EXTQL_BFLOAT16: the float32 result rounded to nearest even).  Layout,
zero point and flags as extql_quantize_range.  Returns 0, or -1 for an unknown code."""),
    ("quantize_f64_range", True, "int",
     ("int qtype", "int xtype", "int stype", "const void *x", "const void *scale",
      "const void *zero_point", "void *y", "int64_t D", "int64_t inner", "int64_t block",
      "int64_t start", "int64_t stop", "int flags", "const float *ones",
      "const void *zero2"),
     """Quantize elements [start, stop) with the division in float64 (precision float64,
the default for an int32 scale): q = x / s in float64 (the scale float32 or int32:
stype), rounded there to an integer for the integer types, plus the zero point for
float16 / bfloat16 / float4e2m1, rounded once to float32; then the float32 formula with
the scales `ones` and the zero points `zero2` that extql_f64_params fills.  Layout and
flags as extql_quantize_range.  Returns 0, or -1 for an unknown code."""),
    ("f64_params", False, "int",
     ("int qtype", "float *ones", "void *zero2", "int64_t count"),
     """The parameters of extql_quantize_f64_range for `count` scales: ones all 1, and
zero2 (room for count float32) all -0 when it returns 1 -- else (0) pass the
operator's own zero point as zero2."""),
    ("convert_scales", False, "int",
     ("int stype", "int prec", "const void *src", "float *dst", "int64_t n"),
     """n scales of the type stype (EXTQL_FLOAT32, EXTQL_FLOAT16, EXTQL_BFLOAT16, or
EXTQL_INT32: rounded to nearest even) as float32 into dst, rounded to nearest even into
prec when that is float16 / bfloat16 (the scale a quantize in that precision divides
by).  Returns 0, or -1 for an unknown code."""),
    ("block_items", False, "int64_t",
     ("const ExtqlBlockParams *p", "int64_t outer", "int64_t D", "int64_t inner"),
     """The work items of a block-format tensor seen as [outer, D, inner] with the blocks
along D: one per block-row, outer * ceil(D / block) (0 for an empty tensor)."""),
    ("block_item_size", False, "int64_t",
     ("const ExtqlBlockParams *p", "int64_t inner"),
     """The elements of a work item (at most): block * inner, what a thread split weighs."""),
    ("block_range", True, "int",
     ("const ExtqlBlockParams *p", "int xtype", "const void *x", "void *y", "int64_t outer",
      "int64_t D", "int64_t inner", "int64_t start", "int64_t stop"),
     """BFPQuantizeDequantize / MXQuantizeDequantize (p: the checked attributes) on work
items [start, stop) of x (xtype: EXTQL_FLOAT32 or EXTQL_FLOAT16), seen as
[outer, D, inner] with the blocks along D, into y of the same type and shape (y may be
x).  A tensor of one element passes through (bfloat16-rounded first when p->bfloat_first
is set).  Returns 0, -1 for another xtype, -2 when a block too long for the stack finds
no memory."""),
    ("dpu_in_range", True, "int",
     ("const float *x", "const float *scale", "const float *bias", "float *y", "int64_t C",
      "int64_t S", "float epsilon", "int64_t start", "int64_t stop"),
     """ExtendedInstanceNormalization (Quark's DPU instance norm) on instances [start, stop)
of float32 x seen as [N * C, S] into y (not x's memory), with the scale and bias of
instance i at i % C.  Returns 0."""),
    ("lstm_params", False, "int",
     ("ExtqlLstmParams *p", "const float *scales", "const int *zero_points",
      "int64_t input", "int64_t hidden", "int dirs", "int reverse"),
     """ExtendedLSTM's fixed-point parameters into p, from the five scales and zero
points (x, w, r, b, y; the zero points uint16 values, checked by the caller), the input
and hidden sizes, the directions (1 or 2) and, for one direction, whether it is
"reverse".  Every member is filled first; returns 0, or the EXTQL_LSTM_BAD_* code of
the first shift outside its range (docs/operators/extended_lstm.rst, "Ranges"), or
EXTQL_LSTM_BAD_SIZE for an input or hidden size outside [1, 2^22)."""),
    ("lstm_prepared_size", False, "int64_t",
     ("const ExtqlLstmParams *p",),
     """Bytes of the buffer extql_lstm_prepare fills (int32-aligned memory suffices)."""),
    ("lstm_prepare", True, "int",
     ("const ExtqlLstmParams *p", "const float *w", "const float *r", "const float *b",
      "void *prepared"),
     """W [dirs, 4H, input], R [dirs, 4H, H] and B [dirs, 8H] (NULL: zeros) quantized
into `prepared`: per direction the transposed int16 weights and the gate constants.
Returns 0, or -2 when it finds no memory."""),
    ("lstm_items", False, "int64_t",
     ("const ExtqlLstmParams *p", "int64_t batch"),
     """The work items of an ExtendedLSTM call: batch * dirs (item n * dirs + d)."""),
    ("lstm_range", True, "int",
     ("const ExtqlLstmParams *p", "const void *prepared", "const float *x", "float *y",
      "float *y_h", "float *y_c", "int64_t seq", "int64_t batch", "int layout",
      "int64_t start", "int64_t stop"),
     """ExtendedLSTM's work items [start, stop), each a batch element in one direction
over its whole sequence: X (layout 0 [seq, batch, input], 1 [batch, seq, input]) into
Y ([seq, dirs, batch, H] / [batch, seq, dirs, H]), Y_h and Y_c ([dirs, batch, H] /
[batch, dirs, H]), any of them NULL when not wanted.  Returns 0, or -2 when it finds
no memory."""),
    ("unpack", False, "int",
     ("int qtype", "const void *src", "void *dst", "int64_t n"),
     """n elements of a sub-byte or small float type as in an ONNX tensor (int4 / uint4 /
int2 / uint2 / float4e2m1 packed) into dst as the kernels take zero points: int8 /
uint8 elements for the sub-byte types (sign-extended for int4 / int2), float32 for the
small floats.  Returns 0, or -1 for another type."""),
)

#: The C types the entry points take besides scalars and pointers: name, the
#: members ("type name: what it is"), what it is.  Written into the public
#: header; the kernels and the shim fill and read them.
STRUCTS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("ExtqlBlockParams",
     ("int kind: EXTQL_BLOCK_BFP (to_bfp), EXTQL_BLOCK_BFP_PRIME (to_bfp_prime) or "
      "EXTQL_BLOCK_MX",
      "int64_t block: block_size, >= 1",
      "int rounding: rounding_mode, 0, 1 or 2",
      "int mbits: BFP: bit_width - 9; MX: the element type's mantissa bits",
      "int bfloat_first: BFP: convert_to_bfloat_before_bfp != 0",
      "int compiler: to_bfp: use_compiler_version_cpu_kernel != 0",
      "int64_t sub_block: to_bfp_prime: sub_block_size, which divides block",
      "int shift_bits: to_bfp_prime: sub_block_shift_bits, 0 to 31",
      "int ebits: MX: the element type's exponent bits (0: int8)",
      "int emax: MX: the element type's emax",
      "float largest: MX: the element type's largest magnitude"),
     "The checked attributes of BFPQuantizeDequantize / MXQuantizeDequantize as the "
     "block-format kernels take them (extql/rules/blocks.py checks and fills them)."),
    ("ExtqlLstmParams",
     ("int64_t input: the input size, >= 1",
      "int64_t hidden: hidden_size H, >= 1",
      "int dirs: 2 for bidirectional, else 1",
      "int reverse: one direction: 1 for reverse",
      "float scale[5]: x, w, r, b and y scales",
      "int zero_point[5]: their zero points, uint16 values",
      "double qxf: float32(x_scale * w_scale) * 2^24",
      "double qhf: float32(y_scale * r_scale) * 2^24",
      "double qaf: qxf * (w_zero_point - 32768)",
      "double qbf: qhf * (r_zero_point - 32768)",
      "int qx: fix(qxf)'s factor", "int ax: fix(qxf)'s exponent",
      "int qh: fix(qhf)'s factor", "int ah: fix(qhf)'s exponent",
      "int qa: fix(qaf)'s factor", "int xs: fix(qaf)'s exponent",
      "int qb: fix(qbf)'s factor", "int hs: fix(qbf)'s exponent",
      "int xw: ceil(log2 input)", "int hr: ceil(log2 H)",
      "int xwq: ax - xw", "int hrq: ah - hr",
      "int ohs: the output rescale's factor (uint16)",
      "int ohz: h's start and the output's offset (int16)",
      "int oh: the output rescale's shift"),
     "ExtendedLSTM's fixed-point parameters (docs/operators/extended_lstm.rst), filled "
     "by extql_lstm_params from a node's attributes and sizes."),
)

#: The refusals of extql_lstm_params: name, code.
LSTM_CODES: tuple[tuple[str, int], ...] = (
    ("OK", 0), ("BAD_AX", 1), ("BAD_AH", 2), ("BAD_XWQ", 3), ("BAD_HRQ", 4), ("BAD_XS", 5),
    ("BAD_HS", 6), ("BAD_OH", 7), ("BAD_SIZE", 8))

#: The block-format operations (ExtqlBlockParams.kind): name, code.
BLOCK_KINDS: tuple[tuple[str, int], ...] = (("BFP", 0), ("BFP_PRIME", 1), ("MX", 2))

#: The flags of the range functions: name, value, meaning.
FLAGS: tuple[tuple[str, int, str], ...] = (
    ("STREAM", 1,
     "write the output with non-temporal stores, bypassing the caches (faster for an "
     "output too large to stay in them); a hint: the bits are the same either way"),
    ("UNPACKED", 2,
     "sub-byte types and float4e2m1 one element per byte, in its low bits (ml_dtypes' "
     "layout), instead of packed 8 / bits per byte, element k of a byte in its bits "
     "[k * bits, (k + 1) * bits) (ONNX's layout)"),
    ("NO_SATURATE", 4,
     "quantize to float8 without saturation (ONNX's saturate = 0): a magnitude beyond "
     "the largest finite value becomes infinity (float8e5m2) or NaN (the others)"),
)

#: Outputs of at least this many bytes are written with non-temporal stores
#: (EXTQL_STREAM) by the NumPy API and the onnxruntime ops.
STREAM_MIN_BYTES: int = 16 * 1024 * 1024
