/*
 * koila.i - the SWIG interface of the Java binding.
 *
 * Wraps every function of koila.h, one to one, into org.koila.raw.KoilaNative (static
 * methods named as in C). The raw layer is the C API with Java types:
 *
 *   opaque handles (koila_tensor *, koila_status *, ...)   long (the address; 0 is NULL)
 *   T **out                                                 long[] (element 0 receives it)
 *   koila_tensor *const *ts, size_t n                       long[] (null: NULL, 0)
 *   koila_tensor **out, size_t capacity (several results)   long[] that receives them
 *   const int64_t *shape, size_t ndim (and dims, n)         long[] (null: NULL, 0)
 *   const int64_t *stride / padding / ... (1 or 2 values)   long[] (null: NULL)
 *   const void *data, size_t nbytes / void *data, nbytes    byte[] (null: NULL, 0)
 *   char *buf, size_t capacity                              byte[] (null: NULL, 0)
 *   int64_t *, uint64_t *, size_t *, double *, int *,
 *   koila_dtype *, koila_phase *, koila_module_kind * (outputs)  long[] / double[] / int[]
 *                                                           (element 0; null: NULL)
 *   int64_t, uint64_t, size_t                               long (uint64_t as unsigned bits)
 *   enums                                                   int (constants in koila_code, ...)
 *   const char * (in and out)                               String, as real UTF-8
 *   void *managed / void **out (DLPack structs)             long / long[] (their address)
 *
 * A fallible function returns its koila_status* as a long: 0 is success; otherwise read it
 * with koila_status_code/koila_status_message and release it with koila_status_free.
 *
 * Beside them, KoilaNative has the JNI layer's DLPack helpers for direct buffers
 * (dlpack_wrap_buffer, dlpack_layout, dlpack_direct_buffer, dlpack_delete,
 * dlpack_shared_buffers; see their section below).
 *
 * The raw layer is as unsafe as C with respect to handles: a freed or made-up address
 * crashes the JVM. Arrays are checked (an out array without room throws
 * IllegalArgumentException). The idiomatic layer (org.koila) never passes a bad handle.
 */
%module KoilaNative

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "koila.h"
%}

/* Enums as int constants (koila_code.KOILA_ERROR_SHAPE, ...), compile-time constants. */
%include "enumtypeunsafe.swg"
%javaconst(1);

/* ------------------------------------------------------------------------------------ */
/* Scalars                                                                                */
/* ------------------------------------------------------------------------------------ */

/* int64_t as a Java long; uint64_t too, as the 64 bits of a long (no BigInteger): byte
   counts and seeds. size_t is a long already. */
%apply long long { int64_t, uint64_t };

/* ------------------------------------------------------------------------------------ */
/* Strings: Java Strings cross as NUL-terminated UTF-8 (not JNI's modified UTF-8), so any */
/* path or device name arrives as written.                                               */
/* ------------------------------------------------------------------------------------ */

%typemap(jni) const char * "jbyteArray"
%typemap(jtype) const char * "byte[]"
%typemap(jstype) const char * "String"
%typemap(javain) const char * "KoilaNativeJNI.toUtf8($javainput)"
%typemap(javaout) const char * { return KoilaNativeJNI.fromUtf8($jnicall); }
%typemap(in) const char * {
  $1 = NULL;
  if ($input) {
    $1 = (char *)JCALL2(GetByteArrayElements, jenv, $input, NULL);
    if (!$1) return $null;
  }
}
%typemap(freearg) const char * {
  if ($input && $1) JCALL3(ReleaseByteArrayElements, jenv, $input, (jbyte *)$1, JNI_ABORT);
}
%typemap(out) const char * {
  $result = NULL;
  if ($1) {
    jsize len = (jsize)strlen($1);
    $result = JCALL1(NewByteArray, jenv, len);
    if ($result) JCALL4(SetByteArrayRegion, jenv, $result, 0, len, (const jbyte *)$1);
  }
}

/* ------------------------------------------------------------------------------------ */
/* Opaque handles                                                                        */
/* ------------------------------------------------------------------------------------ */

/* T **out: a long[] with room for one handle (null passes NULL, which the C side refuses). */
%define KOILA_OUT_POINTER(T)
%typemap(jni) T ** "jlongArray"
%typemap(jtype) T ** "long[]"
%typemap(jstype) T ** "long[]"
%typemap(javain) T ** "KoilaNativeJNI.room($javainput, 1, \"out\")"
%typemap(in) T ** (T *temp = NULL) {
  $1 = NULL;
  if ($input) {
    if (JCALL1(GetArrayLength, jenv, $input) < 1) {
      SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                              "the out array needs room for one handle");
      return $null;
    }
    $1 = &temp;
  }
}
%typemap(argout) T ** {
  if ($input) {
    jlong handle = (jlong)(intptr_t)temp$argnum;
    JCALL4(SetLongArrayRegion, jenv, $input, 0, 1, &handle);
  }
}
%enddef

%define KOILA_HANDLE(T)
%typemap(jni) T *, const T * "jlong"
%typemap(jtype) T *, const T * "long"
%typemap(jstype) T *, const T * "long"
%typemap(javain) T *, const T * "$javainput"
%typemap(javaout) T *, const T * { return $jnicall; }
%typemap(in) T *, const T * %{ $1 = ($1_ltype)(intptr_t)$input; %}
%typemap(out) T *, const T * %{ $result = (jlong)(intptr_t)$1; %}
KOILA_OUT_POINTER(T)
%enddef

KOILA_HANDLE(koila_tensor)
KOILA_HANDLE(koila_status)
KOILA_HANDLE(koila_plan)
KOILA_HANDLE(koila_module)
KOILA_HANDLE(koila_optimizer)
KOILA_HANDLE(koila_group)
KOILA_HANDLE(koila_timeline)

/* DLPack structs (koila_tensor_from_dlpack, koila_tensor_to_dlpack) cross as their address:
   void *managed is a long, void **out a long[] that receives one. */
%typemap(jni) void *managed "jlong"
%typemap(jtype) void *managed "long"
%typemap(jstype) void *managed "long"
%typemap(javain) void *managed "$javainput"
%typemap(in) void *managed %{ $1 = (void *)(intptr_t)$input; %}
KOILA_OUT_POINTER(void)

/* koila_tensor *const *ts, size_t n (also inputs, params): a long[] of tensor handles. */
%define KOILA_TENSOR_ARRAY(NAME)
%typemap(jni) (koila_tensor *const *NAME, size_t n) "jlongArray"
%typemap(jtype) (koila_tensor *const *NAME, size_t n) "long[]"
%typemap(jstype) (koila_tensor *const *NAME, size_t n) "long[]"
%typemap(javain) (koila_tensor *const *NAME, size_t n) "$javainput"
%typemap(in) (koila_tensor *const *NAME, size_t n) (koila_tensor **handles = NULL) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    jsize len = JCALL1(GetArrayLength, jenv, $input);
    if (len > 0) {
      jsize i;
      jlong *elems;
      handles = (koila_tensor **)malloc(sizeof(koila_tensor *) * (size_t)len);
      if (!handles) {
        SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "no memory for the handle array");
        return $null;
      }
      elems = JCALL2(GetLongArrayElements, jenv, $input, NULL);
      if (!elems) return $null; /* OutOfMemoryError pending; freearg frees handles */
      for (i = 0; i < len; ++i) handles[i] = (koila_tensor *)(intptr_t)elems[i];
      JCALL3(ReleaseLongArrayElements, jenv, $input, elems, JNI_ABORT);
      $1 = handles;
    }
    $2 = (size_t)len;
  }
}
%typemap(argout) (koila_tensor *const *NAME, size_t n) ""
%typemap(freearg) (koila_tensor *const *NAME, size_t n) { free(handles$argnum); }
%enddef

KOILA_TENSOR_ARRAY(ts)
KOILA_TENSOR_ARRAY(inputs)
KOILA_TENSOR_ARRAY(params)

/* ------------------------------------------------------------------------------------ */
/* Arrays of int64_t                                                                     */
/* ------------------------------------------------------------------------------------ */

/* const int64_t *shape, size_t ndim (also dims/ndims, normalized_shape/n): long[]. */
%define KOILA_INT64_ARRAY(NAME, COUNT)
%typemap(jni) (const int64_t *NAME, size_t COUNT) "jlongArray"
%typemap(jtype) (const int64_t *NAME, size_t COUNT) "long[]"
%typemap(jstype) (const int64_t *NAME, size_t COUNT) "long[]"
%typemap(javain) (const int64_t *NAME, size_t COUNT) "$javainput"
%typemap(in) (const int64_t *NAME, size_t COUNT) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    $2 = (size_t)JCALL1(GetArrayLength, jenv, $input);
    $1 = (int64_t *)JCALL2(GetLongArrayElements, jenv, $input, NULL);
    if (!$1) return $null;
  }
}
%typemap(freearg) (const int64_t *NAME, size_t COUNT) {
  if ($input && $1) JCALL3(ReleaseLongArrayElements, jenv, $input, (jlong *)$1, JNI_ABORT);
}
%enddef

KOILA_INT64_ARRAY(shape, ndim)
KOILA_INT64_ARRAY(dims, ndim)
KOILA_INT64_ARRAY(dims, ndims)
KOILA_INT64_ARRAY(normalized_shape, n)

/* Convolution and pooling parameters without a count: the C side reads one value (1d) or
   two (2d). The array may hold one or two values; one value stands for both dims (as an
   int does in PyTorch), so C never reads past what Java passed. null passes NULL. */
%define KOILA_INT64_PAIR(NAME)
%typemap(jni) const int64_t *NAME "jlongArray"
%typemap(jtype) const int64_t *NAME "long[]"
%typemap(jstype) const int64_t *NAME "long[]"
%typemap(javain) const int64_t *NAME "KoilaNativeJNI.pair($javainput, \"NAME\")"
%typemap(in) const int64_t *NAME (int64_t pair[2]) {
  $1 = NULL;
  if ($input) {
    jsize len = JCALL1(GetArrayLength, jenv, $input);
    jlong values[2];
    if (len < 1 || len > 2) {
      SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                              "NAME: expected 1 or 2 values");
      return $null;
    }
    JCALL4(GetLongArrayRegion, jenv, $input, 0, len, values);
    pair[0] = (int64_t)values[0];
    pair[1] = (int64_t)values[len - 1];
    $1 = pair;
  }
}
%enddef

KOILA_INT64_PAIR(stride)
KOILA_INT64_PAIR(padding)
KOILA_INT64_PAIR(dilation)
KOILA_INT64_PAIR(kernel)
KOILA_INT64_PAIR(output_size)
KOILA_INT64_PAIR(scale)

/* int64_t *dims, size_t capacity (koila_tensor_shape): a long[] that receives the sizes. */
%typemap(jni) (int64_t *dims, size_t capacity) "jlongArray"
%typemap(jtype) (int64_t *dims, size_t capacity) "long[]"
%typemap(jstype) (int64_t *dims, size_t capacity) "long[]"
%typemap(javain) (int64_t *dims, size_t capacity) "$javainput"
%typemap(in) (int64_t *dims, size_t capacity) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    $2 = (size_t)JCALL1(GetArrayLength, jenv, $input);
    $1 = (int64_t *)JCALL2(GetLongArrayElements, jenv, $input, NULL);
    if (!$1) return $null;
  }
}
%typemap(freearg) (int64_t *dims, size_t capacity) {
  if ($input && $1) JCALL3(ReleaseLongArrayElements, jenv, $input, (jlong *)$1, 0);
}

/* koila_tensor **out, size_t capacity (koila_module_forward_all): a long[] that receives a
   handle per result (0 for None), as many as it has room for (null: NULL, 0). */
%typemap(jni) (koila_tensor **out, size_t capacity) "jlongArray"
%typemap(jtype) (koila_tensor **out, size_t capacity) "long[]"
%typemap(jstype) (koila_tensor **out, size_t capacity) "long[]"
%typemap(javain) (koila_tensor **out, size_t capacity) "$javainput"
%typemap(in) (koila_tensor **out, size_t capacity) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    $2 = (size_t)JCALL1(GetArrayLength, jenv, $input);
    $1 = (koila_tensor **)calloc($2 ? $2 : 1, sizeof(koila_tensor *));
    if (!$1) {
      SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "no memory for the result handles");
      return $null;
    }
  }
}
%typemap(argout) (koila_tensor **out, size_t capacity) {
  if ($input && $1) {
    size_t i;
    for (i = 0; i < $2; ++i) {
      jlong handle = (jlong)(intptr_t)$1[i];
      JCALL4(SetLongArrayRegion, jenv, $input, (jsize)i, 1, &handle);
    }
  }
}
%typemap(freearg) (koila_tensor **out, size_t capacity) { free($1); }

/* ------------------------------------------------------------------------------------ */
/* Byte buffers                                                                          */
/* ------------------------------------------------------------------------------------ */

/* Input data, output data and text buffers: byte[] (null: NULL, 0). Writes are copied back. */
%define KOILA_BYTES(PTR, PTRNAME, SIZENAME, RELEASE_MODE)
%typemap(jni) (PTR PTRNAME, size_t SIZENAME) "jbyteArray"
%typemap(jtype) (PTR PTRNAME, size_t SIZENAME) "byte[]"
%typemap(jstype) (PTR PTRNAME, size_t SIZENAME) "byte[]"
%typemap(javain) (PTR PTRNAME, size_t SIZENAME) "$javainput"
%typemap(in) (PTR PTRNAME, size_t SIZENAME) {
  $1 = NULL;
  $2 = 0;
  if ($input) {
    $2 = (size_t)JCALL1(GetArrayLength, jenv, $input);
    $1 = ($1_ltype)JCALL2(GetByteArrayElements, jenv, $input, NULL);
    if (!$1) return $null;
  }
}
%typemap(freearg) (PTR PTRNAME, size_t SIZENAME) {
  if ($input && $1) JCALL3(ReleaseByteArrayElements, jenv, $input, (jbyte *)$1, RELEASE_MODE);
}
%enddef

KOILA_BYTES(const void *, data, nbytes, JNI_ABORT)
KOILA_BYTES(void *, data, nbytes, 0)
KOILA_BYTES(char *, buf, capacity, 0)

/* ------------------------------------------------------------------------------------ */
/* Scalar outputs: an array whose element 0 receives the value (null passes NULL).        */
/* ------------------------------------------------------------------------------------ */

%define KOILA_OUT(CTYPE, NAME, JNIARRAY, JARRAY, JELEM, SETREGION)
%typemap(jni) CTYPE *NAME "JNIARRAY"
%typemap(jtype) CTYPE *NAME "JARRAY"
%typemap(jstype) CTYPE *NAME "JARRAY"
%typemap(javain) CTYPE *NAME "KoilaNativeJNI.room($javainput, 1, \"NAME\")"
%typemap(in) CTYPE *NAME (CTYPE temp) {
  $1 = NULL;
  memset(&temp, 0, sizeof temp);
  if ($input) {
    if (JCALL1(GetArrayLength, jenv, $input) < 1) {
      SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                              "$1_name: the out array needs room for one value");
      return $null;
    }
    $1 = &temp;
  }
}
%typemap(argout) CTYPE *NAME {
  if ($input) {
    JELEM value = (JELEM)temp$argnum;
    JCALL4(SETREGION, jenv, $input, 0, 1, &value);
  }
}
%enddef

KOILA_OUT(int64_t, out, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(uint64_t, out, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(uint64_t, current, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(uint64_t, peak, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(size_t, out, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(size_t, ndim, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(size_t, needed, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(size_t, count, jlongArray, long[], jlong, SetLongArrayRegion)
KOILA_OUT(double, out, jdoubleArray, double[], jdouble, SetDoubleArrayRegion)
KOILA_OUT(int, out, jintArray, int[], jint, SetIntArrayRegion)
KOILA_OUT(koila_dtype, out, jintArray, int[], jint, SetIntArrayRegion)
KOILA_OUT(koila_phase, out, jintArray, int[], jint, SetIntArrayRegion)
KOILA_OUT(koila_module_kind, out, jintArray, int[], jint, SetIntArrayRegion)

/* ------------------------------------------------------------------------------------ */
/* Progress: koila_set_progress(fn, user) takes one Object with a method                  */
/* void onChunk(String what, long done, long total) (org.koila.ProgressListener), or null */
/* to turn reports off. A C trampoline calls it on the thread running the chunk,         */
/* attaching that thread to the JVM when it is not attached (never the case for runs     */
/* started from Java). An exception the listener throws cannot cross koila's C code: it  */
/* is printed (ExceptionDescribe) and dropped.                                            */
/* ------------------------------------------------------------------------------------ */

%{
#include <pthread.h>

static JavaVM *koila_progress_vm = NULL;
static jobject koila_progress_listener = NULL; /* a global reference */
static jmethodID koila_progress_on_chunk = NULL;
static pthread_mutex_t koila_progress_lock = PTHREAD_MUTEX_INITIALIZER;

static void koila_progress_trampoline(void *user, const char *what, int64_t done, int64_t total) {
  JNIEnv *env = NULL;
  int attached = 0;
  jobject listener = NULL;
  jmethodID method = NULL;
  (void)user;
  if (!koila_progress_vm) return;
  if ((*koila_progress_vm)->GetEnv(koila_progress_vm, (void **)&env, JNI_VERSION_1_6) == JNI_EDETACHED) {
    if ((*koila_progress_vm)->AttachCurrentThreadAsDaemon(koila_progress_vm, (void **)&env, NULL) != JNI_OK) return;
    attached = 1;
  }
  if (env && !(*env)->ExceptionCheck(env)) {
    /* A local reference taken under the lock: a listener replaced meanwhile stays valid. */
    pthread_mutex_lock(&koila_progress_lock);
    if (koila_progress_listener) listener = (*env)->NewLocalRef(env, koila_progress_listener);
    method = koila_progress_on_chunk;
    pthread_mutex_unlock(&koila_progress_lock);
    if (listener) {
      jstring jwhat = (*env)->NewStringUTF(env, what);
      if (jwhat) {
        (*env)->CallVoidMethod(env, listener, method, jwhat, (jlong)done, (jlong)total);
        (*env)->DeleteLocalRef(env, jwhat);
      }
      if ((*env)->ExceptionCheck(env)) (*env)->ExceptionDescribe(env);
      (*env)->DeleteLocalRef(env, listener);
    }
  }
  if (attached) (*koila_progress_vm)->DetachCurrentThread(koila_progress_vm);
}

/* Makes `listener` (or nothing, for null) the one the trampoline calls. 0: a Java
   exception is pending. */
static int koila_progress_install(JNIEnv *jenv, jobject listener) {
  jobject global = NULL, old;
  jmethodID method = NULL;
  if (listener) {
    jclass cls = (*jenv)->GetObjectClass(jenv, listener);
    if (!cls) return 0;
    method = (*jenv)->GetMethodID(jenv, cls, "onChunk", "(Ljava/lang/String;JJ)V");
    (*jenv)->DeleteLocalRef(jenv, cls);
    if (!method) return 0; /* NoSuchMethodError pending */
    if (!koila_progress_vm && (*jenv)->GetJavaVM(jenv, &koila_progress_vm) != JNI_OK) {
      SWIG_JavaThrowException(jenv, SWIG_JavaRuntimeException, "koila: no JavaVM for the progress listener");
      return 0;
    }
    global = (*jenv)->NewGlobalRef(jenv, listener);
    if (!global) return 0;
  }
  pthread_mutex_lock(&koila_progress_lock);
  old = koila_progress_listener;
  koila_progress_listener = global;
  koila_progress_on_chunk = method;
  pthread_mutex_unlock(&koila_progress_lock);
  if (old) (*jenv)->DeleteGlobalRef(jenv, old);
  return 1;
}
%}

%typemap(jni) (koila_progress_fn fn, void *user) "jobject"
%typemap(jtype) (koila_progress_fn fn, void *user) "Object"
%typemap(jstype) (koila_progress_fn fn, void *user) "Object"
%typemap(javain) (koila_progress_fn fn, void *user) "$javainput"
%typemap(in) (koila_progress_fn fn, void *user) {
  if (!koila_progress_install(jenv, $input)) return $null;
  $1 = $input ? koila_progress_trampoline : NULL;
  $2 = NULL;
}

/* ------------------------------------------------------------------------------------ */
/* DLPack over direct buffers: helpers of the JNI layer (not koila.h functions), so that  */
/* org.koila.Tensor shares memory with a java.nio direct buffer both ways, no copy.       */
/*                                                                                        */
/*   dlpack_wrap_buffer   a new DLManagedTensorVersioned (DLPack 1.1) over a direct       */
/*                        buffer's memory, for koila_tensor_from_dlpack; it holds a JNI   */
/*                        global reference to the buffer, which its deleter deletes (on   */
/*                        any thread: a thread koila frees it on is attached if need be). */
/*                        Checks that the elements fit the buffer's capacity; throws      */
/*                        IllegalArgumentException (and returns 0) otherwise.             */
/*   dlpack_shared_buffers  how many of those structs are alive (made, deleter not yet    */
/*                        run): for tests.                                                */
/*   dlpack_layout        reads a DLManagedTensor(Versioned) (what koila_tensor_to_dlpack */
/*                        made) into a long[]: data + byte_offset, device type and id,    */
/*                        dtype code, bits, lanes, ndim, then the sizes and the strides.  */
/*   dlpack_direct_buffer a direct ByteBuffer over memory C owns (NewDirectByteBuffer).   */
/*   dlpack_delete        calls a DLPack struct's deleter.                                */
/* The structs are declared from the DLPack specification (koila.h has them as void *).  */
/* ------------------------------------------------------------------------------------ */

%{
typedef struct { int32_t device_type, device_id; } koila_jni_dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } koila_jni_dl_dtype;
typedef struct {
  void *data;
  koila_jni_dl_device device;
  int32_t ndim;
  koila_jni_dl_dtype dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} koila_jni_dl_tensor;
typedef struct koila_jni_dl_managed {
  koila_jni_dl_tensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct koila_jni_dl_managed *self);
} koila_jni_dl_managed;
typedef struct koila_jni_dl_versioned {
  struct { uint32_t major, minor; } version;
  void *manager_ctx;
  void (*deleter)(struct koila_jni_dl_versioned *self);
  uint64_t flags;
  koila_jni_dl_tensor dl_tensor;
} koila_jni_dl_versioned;

/* The layouts DLPack fixes on 64-bit targets (koila checks its own copy the same way). */
typedef char koila_jni_dl_layout_check[sizeof(koila_jni_dl_managed) == 64 &&
                                       sizeof(koila_jni_dl_versioned) == 80 ? 1 : -1];

enum { KOILA_JNI_DL_INT = 0, KOILA_JNI_DL_UINT = 1, KOILA_JNI_DL_FLOAT = 2, KOILA_JNI_DL_BFLOAT = 4,
       KOILA_JNI_DL_BOOL = 6 };
#define KOILA_JNI_DL_READ_ONLY ((uint64_t)1)
#define KOILA_JNI_LAYOUT_FIXED 7

/* A struct over a direct buffer: the buffer's global reference and the sizes beside it. */
typedef struct {
  koila_jni_dl_versioned managed;
  jobject buffer;
  int64_t shape[1]; /* ndim of them (at least one allocated) */
} koila_jni_shared_buffer;

static JavaVM *koila_dlpack_vm = NULL;
static long koila_dlpack_live = 0; /* structs whose deleter has not run: __atomic */

static void koila_jni_shared_buffer_delete(koila_jni_dl_versioned *self) {
  koila_jni_shared_buffer *s = (koila_jni_shared_buffer *)self->manager_ctx;
  JNIEnv *env = NULL;
  int attached = 0;
  jint got = (*koila_dlpack_vm)->GetEnv(koila_dlpack_vm, (void **)&env, JNI_VERSION_1_6);
  if (got == JNI_EDETACHED) {
    if ((*koila_dlpack_vm)->AttachCurrentThreadAsDaemon(koila_dlpack_vm, (void **)&env, NULL) == JNI_OK) {
      attached = 1;
    } else {
      env = NULL;
    }
  } else if (got != JNI_OK) {
    env = NULL;
  }
  /* Without a JNIEnv (the JVM going away) the reference is left: the buffer stays alive. */
  if (env) (*env)->DeleteGlobalRef(env, s->buffer);
  if (attached) (*koila_dlpack_vm)->DetachCurrentThread(koila_dlpack_vm);
  __atomic_sub_fetch(&koila_dlpack_live, 1, __ATOMIC_SEQ_CST);
  free(s);
}

/* DLPack's code and bits of a koila_dtype; 0 for an unknown value. */
static int koila_jni_dl_dtype_of(int dtype, koila_jni_dl_dtype *out) {
  static const koila_jni_dl_dtype table[] = {
      {KOILA_JNI_DL_FLOAT, 32, 1}, {KOILA_JNI_DL_FLOAT, 64, 1}, {KOILA_JNI_DL_FLOAT, 16, 1},
      {KOILA_JNI_DL_BFLOAT, 16, 1}, {KOILA_JNI_DL_INT, 64, 1}, {KOILA_JNI_DL_INT, 32, 1},
      {KOILA_JNI_DL_INT, 8, 1}, {KOILA_JNI_DL_UINT, 8, 1}, {KOILA_JNI_DL_BOOL, 8, 1}};
  if (dtype < 0 || dtype >= (int)(sizeof table / sizeof table[0])) return 0;
  *out = table[dtype];
  return 1;
}

static int64_t dlpack_wrap_buffer(JNIEnv *jenv, jobject buffer, int64_t byte_offset, int buffer_element_size,
                                  int dtype, const int64_t *shape, size_t ndim, int read_only) {
  koila_jni_dl_dtype dl;
  char *address;
  jlong capacity;
  int64_t numel = 1, nbytes;
  size_t i;
  koila_jni_shared_buffer *s;
  if (!buffer) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "dlpack_wrap_buffer: buffer is null");
    return 0;
  }
  if (!koila_jni_dl_dtype_of(dtype, &dl)) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "dlpack_wrap_buffer: unknown dtype");
    return 0;
  }
  if (ndim > INT32_MAX || (ndim > 0 && !shape)) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException, "dlpack_wrap_buffer: bad shape");
    return 0;
  }
  address = (char *)(*jenv)->GetDirectBufferAddress(jenv, buffer);
  capacity = (*jenv)->GetDirectBufferCapacity(jenv, buffer);
  if (!address || capacity < 0) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "dlpack_wrap_buffer: not a direct buffer (or this JVM gives no access to its memory)");
    return 0;
  }
  /* A negative size is koila's to refuse (nothing is read then); an element count that
     overflows is refused here. */
  for (i = 0; i < ndim; ++i) {
    if (shape[i] < 0) {
      numel = 0;
      break;
    }
    if (shape[i] != 0 && numel > INT64_MAX / shape[i]) {
      numel = -1;
      break;
    }
    numel *= shape[i];
  }
  nbytes = numel < 0 || numel > INT64_MAX / 8 ? -1 : numel * (dl.bits / 8);
  if (nbytes < 0 || byte_offset < 0 || buffer_element_size <= 0 ||
      capacity > INT64_MAX / buffer_element_size || byte_offset > capacity * buffer_element_size ||
      nbytes > capacity * buffer_element_size - byte_offset) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "dlpack_wrap_buffer: the elements reach past the buffer's capacity");
    return 0;
  }
  if (!koila_dlpack_vm && (*jenv)->GetJavaVM(jenv, &koila_dlpack_vm) != JNI_OK) {
    SWIG_JavaThrowException(jenv, SWIG_JavaRuntimeException, "dlpack_wrap_buffer: no JavaVM");
    return 0;
  }
  s = (koila_jni_shared_buffer *)calloc(1, sizeof *s + (ndim > 1 ? ndim - 1 : 0) * sizeof(int64_t));
  if (!s) {
    SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "dlpack_wrap_buffer: no memory");
    return 0;
  }
  s->buffer = (*jenv)->NewGlobalRef(jenv, buffer);
  if (!s->buffer) {
    free(s);
    return 0; /* OutOfMemoryError pending */
  }
  for (i = 0; i < ndim; ++i) s->shape[i] = shape[i];
  s->managed.version.major = 1;
  s->managed.version.minor = 1;
  s->managed.manager_ctx = s;
  s->managed.deleter = koila_jni_shared_buffer_delete;
  s->managed.flags = read_only ? KOILA_JNI_DL_READ_ONLY : 0;
  s->managed.dl_tensor.data = address;
  s->managed.dl_tensor.device.device_type = 1; /* kDLCPU */
  s->managed.dl_tensor.device.device_id = 0;
  s->managed.dl_tensor.ndim = (int32_t)ndim;
  s->managed.dl_tensor.dtype = dl;
  s->managed.dl_tensor.shape = s->shape;
  s->managed.dl_tensor.strides = NULL; /* compact, row-major */
  s->managed.dl_tensor.byte_offset = (uint64_t)byte_offset;
  __atomic_add_fetch(&koila_dlpack_live, 1, __ATOMIC_SEQ_CST);
  return (int64_t)(intptr_t)&s->managed;
}

static int64_t dlpack_shared_buffers(void) { return __atomic_load_n(&koila_dlpack_live, __ATOMIC_SEQ_CST); }

static const koila_jni_dl_tensor *koila_jni_dl_tensor_of(int64_t managed, int versioned) {
  if (versioned) return &((const koila_jni_dl_versioned *)(intptr_t)managed)->dl_tensor;
  return &((const koila_jni_dl_managed *)(intptr_t)managed)->dl_tensor;
}

static int64_t dlpack_layout(int64_t managed, int versioned, int64_t *dims, size_t capacity) {
  const koila_jni_dl_tensor *t;
  int64_t needed;
  int32_t i;
  if (!managed) return -1;
  t = koila_jni_dl_tensor_of(managed, versioned);
  needed = KOILA_JNI_LAYOUT_FIXED + 2 * (int64_t)(t->ndim > 0 ? t->ndim : 0);
  if ((int64_t)capacity < needed) return needed;
  dims[0] = (int64_t)(intptr_t)((char *)t->data + t->byte_offset);
  dims[1] = t->device.device_type;
  dims[2] = t->device.device_id;
  dims[3] = t->dtype.code;
  dims[4] = t->dtype.bits;
  dims[5] = t->dtype.lanes;
  dims[6] = t->ndim;
  for (i = 0; i < t->ndim; ++i) {
    dims[KOILA_JNI_LAYOUT_FIXED + i] = t->shape[i];
    dims[KOILA_JNI_LAYOUT_FIXED + t->ndim + i] = t->strides ? t->strides[i] : 0;
  }
  /* NULL strides (compact and row-major): written out. */
  if (!t->strides && t->ndim > 0) {
    int64_t stride = 1;
    for (i = t->ndim - 1; i >= 0; --i) {
      dims[KOILA_JNI_LAYOUT_FIXED + t->ndim + i] = stride;
      stride *= t->shape[i];
    }
  }
  return needed;
}

static jobject dlpack_direct_buffer(JNIEnv *jenv, int64_t address, int64_t capacity) {
  if (!address || capacity < 0 || capacity > INT32_MAX) {
    SWIG_JavaThrowException(jenv, SWIG_JavaIllegalArgumentException,
                            "dlpack_direct_buffer: a NULL address, or a capacity outside a ByteBuffer's");
    return NULL;
  }
  return (*jenv)->NewDirectByteBuffer(jenv, (void *)(intptr_t)address, (jlong)capacity);
}

static void dlpack_delete(int64_t managed, int versioned) {
  if (!managed) return;
  if (versioned) {
    koila_jni_dl_versioned *m = (koila_jni_dl_versioned *)(intptr_t)managed;
    if (m->deleter) m->deleter(m);
  } else {
    koila_jni_dl_managed *m = (koila_jni_dl_managed *)(intptr_t)managed;
    if (m->deleter) m->deleter(m);
  }
}
%}

/* The JNIEnv of the call, never a Java argument. */
%typemap(in, numinputs=0) JNIEnv *jenv "$1 = jenv;"
/* Any java.nio.Buffer (direct: the helpers check). */
%typemap(jni) jobject buffer "jobject"
%typemap(jtype) jobject buffer "java.nio.Buffer"
%typemap(jstype) jobject buffer "java.nio.Buffer"
%typemap(javain) jobject buffer "$javainput"
%typemap(in) jobject buffer "$1 = $input;"
/* A new java.nio.ByteBuffer (in the platform's byte order: set it with order()). */
%typemap(jni) jobject dlpack_direct_buffer "jobject"
%typemap(jtype) jobject dlpack_direct_buffer "java.nio.ByteBuffer"
%typemap(jstype) jobject dlpack_direct_buffer "java.nio.ByteBuffer"
%typemap(javaout) jobject dlpack_direct_buffer { return $jnicall; }
%typemap(out) jobject dlpack_direct_buffer "$result = $1;"

int64_t dlpack_wrap_buffer(JNIEnv *jenv, jobject buffer, int64_t byte_offset, int buffer_element_size, int dtype,
                           const int64_t *shape, size_t ndim, int read_only);
int64_t dlpack_shared_buffers(void);
int64_t dlpack_layout(int64_t managed, int versioned, int64_t *dims, size_t capacity);
jobject dlpack_direct_buffer(JNIEnv *jenv, int64_t address, int64_t capacity);
void dlpack_delete(int64_t managed, int versioned);

/* ------------------------------------------------------------------------------------ */
/* The classes                                                                           */
/* ------------------------------------------------------------------------------------ */

/* INT64_MIN means nothing to SWIG: give the constant its Java value. */
%javaconstvalue("Long.MIN_VALUE") KOILA_NO_BATCH;
%constant int64_t KOILA_NO_BATCH = INT64_MIN;

%pragma(java) moduleclassmodifiers="
/**
 * The C API of koila, one static method per function of {@code koila.h}, generated by SWIG.
 *
 * <p>Handles are {@code long} addresses, outputs are arrays whose element 0 receives the
 * value, and a fallible call returns its status handle (0 on success; read it with
 * {@link #koila_status_code} and {@link #koila_status_message}, release it with
 * {@link #koila_status_free}). This layer is as unsafe as the C API: a freed or made-up
 * handle crashes the JVM. Prefer the classes of {@code org.koila}.
 */
public final class"

%pragma(java) jniclassclassmodifiers="
/** The JNI entry points of {@link KoilaNative} (which checks arrays before calling them); loads the native library. */
final class"

%pragma(java) jniclasscode=%{
  static {
    String path = System.getProperty("koila.jni.library");
    try {
      if (path != null && !path.isEmpty()) {
        System.load(path);
      } else {
        System.loadLibrary("koila_jni");
      }
    } catch (UnsatisfiedLinkError e) {
      UnsatisfiedLinkError error = new UnsatisfiedLinkError(
          "koila: cannot load the JNI library " + (path != null && !path.isEmpty() ? path : "koila_jni")
          + " (set -Djava.library.path to the directory of libkoila_jni.so, or -Dkoila.jni.library"
          + " to its path): " + e.getMessage());
      error.initCause(e);
      throw error;
    }
  }

  private KoilaNativeJNI() {}

  /** NUL-terminated UTF-8 of a Java String; null stays null. */
  static byte[] toUtf8(String s) {
    if (s == null) return null;
    if (s.indexOf('\0') >= 0) {
      throw new IllegalArgumentException("koila: a string passed to C contains a NUL character");
    }
    byte[] bytes = s.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    return java.util.Arrays.copyOf(bytes, bytes.length + 1);
  }

  /** Checks that an out array (or null) has room for {@code n} values. */
  static <A> A room(A array, int n, String name) {
    if (array != null && java.lang.reflect.Array.getLength(array) < n) {
      throw new IllegalArgumentException("koila: the out array " + name + " needs room for " + n + " value(s)");
    }
    return array;
  }

  /** Checks a convolution or pooling parameter (or null): one or two values. */
  static long[] pair(long[] array, String name) {
    if (array != null && (array.length < 1 || array.length > 2)) {
      throw new IllegalArgumentException("koila: " + name + " takes 1 or 2 values, not " + array.length);
    }
    return array;
  }

  /** The String of UTF-8 bytes; null stays null. */
  static String fromUtf8(byte[] bytes) {
    return bytes == null ? null : new String(bytes, java.nio.charset.StandardCharsets.UTF_8);
  }
%}

%pragma(java) modulecode=%{
  private KoilaNative() {}
%}

%include "koila.h"
