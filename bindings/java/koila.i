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
 *
 * A fallible function returns its koila_status* as a long: 0 is success; otherwise read it
 * with koila_status_code/koila_status_message and release it with koila_status_free.
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

%define KOILA_HANDLE(T)
%typemap(jni) T *, const T * "jlong"
%typemap(jtype) T *, const T * "long"
%typemap(jstype) T *, const T * "long"
%typemap(javain) T *, const T * "$javainput"
%typemap(javaout) T *, const T * { return $jnicall; }
%typemap(in) T *, const T * %{ $1 = ($1_ltype)(intptr_t)$input; %}
%typemap(out) T *, const T * %{ $result = (jlong)(intptr_t)$1; %}

/* T **out: a long[] with room for one handle (null passes NULL, which the C side refuses). */
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

KOILA_HANDLE(koila_tensor)
KOILA_HANDLE(koila_status)
KOILA_HANDLE(koila_plan)
KOILA_HANDLE(koila_module)
KOILA_HANDLE(koila_optimizer)
KOILA_HANDLE(koila_group)
KOILA_HANDLE(koila_timeline)

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
