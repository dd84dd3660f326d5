#pragma once

// Every op the engine knows, named once. The op table (ops.cc) and the kernel
// table of every device (cpu_kernels.cc, cuda/cuda_kernels.cc) are expanded
// from these lists, so an op cannot be added to one and forgotten in another:
// a device without `<Name>Kernel` for an op that has one does not compile,
// and op_list_test.cc checks what each device registers against the lists.
//
// Each list takes a macro X and applies it to every op in it.

// Ops that run a kernel on every device, with their OpDef (op_registry.h):
// X(Name, num_inputs, num_outputs, shape_fn, grad_fn). shape_fn and grad_fn
// name functions of ops.cc.
#define KUBETRAIN_KERNEL_OPS(X)                                     \
  X(Const, 0, 1, ConstShape, nullptr)                               \
  X(ZerosLike, 1, 1, SameAsInput0, nullptr)                         \
  X(MatMul, 2, 1, MatMulShape, MatMulGrad)                          \
  X(BiasAdd, 2, 1, BiasAddShape, BiasAddGrad)                       \
  X(BiasAddGrad, 1, 1, BiasAddGradShape, nullptr)                   \
  X(BiasActivation, 2, 1, BiasAddShape, BiasActivationGrad)         \
  X(BiasActivationGrad, 2, 2, BiasActivationGradShape, nullptr)     \
  X(Add, 2, 1, BinaryShape, AddGrad)                                \
  X(Sub, 2, 1, BinaryShape, SubGrad)                                \
  X(Mul, 2, 1, BinaryShape, MulGrad)                                \
  X(Neg, 1, 1, SameAsInput0, NegGrad)                               \
  X(SumLike, 2, 1, SumLikeShape, nullptr)                           \
  X(Relu, 1, 1, SameAsInput0, ActivationGrad<kReluGrad>)            \
  X(Tanh, 1, 1, SameAsInput0, ActivationGrad<kTanhGrad>)            \
  X(Sigmoid, 1, 1, SameAsInput0, ActivationGrad<kSigmoidGrad>)      \
  X(ReluGrad, 2, 1, SameTwoShape, nullptr)                          \
  X(TanhGrad, 2, 1, SameTwoShape, nullptr)                          \
  X(SigmoidGrad, 2, 1, SameTwoShape, nullptr)                       \
  X(SoftmaxCrossEntropy, 2, 2, SoftmaxXentShape, SoftmaxXentGrad)   \
  X(Softmax, 1, 1, SoftmaxShape, nullptr)                           \
  X(Accuracy, 2, 1, AccuracyShape, nullptr)                         \
  X(Sum, 1, 1, ReduceShape, SumGrad)                                \
  X(Mean, 1, 1, ReduceShape, MeanGrad)                              \
  X(ReduceGrad, 2, 1, ReduceGradShape, nullptr)                     \
  X(Dropout, 1, 2, DropoutShape, DropoutGrad)                       \
  X(Conv2D, 2, 1, Conv2DShape, Conv2DGrad)                          \
  X(Conv2DBackpropInput, 3, 1, Conv2DBackpropInputShape, nullptr)   \
  X(Conv2DBackpropFilter, 3, 1, Conv2DBackpropFilterShape, nullptr) \
  X(MaxPool, 1, 1, MaxPoolShape, MaxPoolGrad)                       \
  X(MaxPoolGrad, 2, 1, MaxPoolGradShape, nullptr)

// The optimizers' in-place updates (optimizer.h): a kernel on every device,
// no OpDef. X(Name).
#define KUBETRAIN_UPDATE_OPS(X) \
  X(ApplyGradientDescent)       \
  X(ApplyMomentum)              \
  X(ApplyAdagrad)               \
  X(ApplyAdam)

// Ops with an OpDef and no kernel. Sources, whose values come from feeds or
// the variable store: X(Name).
#define KUBETRAIN_SOURCE_OPS(X) \
  X(Placeholder)                \
  X(Variable)

// Views, output 0 a view of input 0 that the executor makes:
// X(Name, num_inputs, num_outputs, shape_fn, grad_fn).
#define KUBETRAIN_VIEW_OPS(X)                             \
  X(Reshape, 1, 1, ReshapeShape, ReshapeGrad)             \
  X(ReshapeLike, 2, 1, ReshapeLikeShape, ReshapeLikeGrad) \
  X(Flatten, 1, 1, FlattenShape, ReshapeGrad)

// A kernel table entry {"Name", NameKernel} for X(Name, ...): the kernel
// tables of every device are
//   {KUBETRAIN_KERNEL_OPS(KUBETRAIN_KERNEL_ENTRY) KUBETRAIN_UPDATE_OPS(KUBETRAIN_KERNEL_ENTRY)}.
#define KUBETRAIN_KERNEL_ENTRY(name, ...) {#name, name##Kernel},
