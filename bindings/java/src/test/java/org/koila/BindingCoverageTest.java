package org.koila;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.koila.raw.KoilaNative;

/** Every function declared in koila.h is reachable from Java, raw and idiomatic. */
class BindingCoverageTest {
  private static final Pattern DECLARATION = Pattern.compile("KOILA_API[^;(]*?\\b(koila_\\w+)\\s*\\(");

  /** The names of the functions koila.h declares. */
  static Set<String> declared() throws IOException {
    String header = new String(Files.readAllBytes(Paths.get(TestSupport.property("koila.test.header"))),
        StandardCharsets.UTF_8);
    header = header.replaceAll("(?s)/\\*.*?\\*/", " "); // comments may mention functions
    Set<String> names = new LinkedHashSet<>();
    Matcher m = DECLARATION.matcher(header);
    while (m.find()) names.add(m.group(1));
    return names;
  }

  @Test
  void everyFunctionIsARawMethod() throws IOException {
    Set<String> names = declared();
    assertTrue(names.size() >= 100, "parsed " + names.size() + " functions from koila.h");
    Set<String> methods = new TreeSet<>();
    for (Method m : KoilaNative.class.getMethods()) {
      if (Modifier.isStatic(m.getModifiers())) methods.add(m.getName());
    }
    List<String> missing = names.stream().filter(n -> !methods.contains(n)).collect(Collectors.toList());
    assertEquals(List.of(), missing, "functions of koila.h without a method in KoilaNative");
  }

  /**
   * The typemaps cover every parameter: no SWIGTYPE_p_ wrapper or BigInteger appears. The
   * one Object is koila_set_progress's listener (anything with onChunk; see koila.i).
   */
  @Test
  void rawMethodsUseOnlyPlainJavaTypes() {
    List<String> bad = new ArrayList<>();
    for (Method m : KoilaNative.class.getDeclaredMethods()) {
      if (!m.getName().startsWith("koila_")) continue;
      List<Class<?>> types = new ArrayList<>(Arrays.asList(m.getParameterTypes()));
      types.add(m.getReturnType());
      for (Class<?> t : types) {
        Class<?> base = t.isArray() ? t.getComponentType() : t;
        boolean listener = m.getName().equals("koila_set_progress") && base == Object.class;
        if (!base.isPrimitive() && base != String.class && !listener) bad.add(m.getName() + ": " + t.getName());
      }
    }
    assertEquals(List.of(), bad);
  }

  /** The idiomatic classes call every function (the raw layer is never the only way). */
  @Test
  void everyFunctionIsUsedByTheIdiomaticLayer() throws IOException {
    Path dir = Paths.get(TestSupport.property("koila.test.sources"), "org", "koila");
    StringBuilder sources = new StringBuilder();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path f : (Iterable<Path>) files.filter(p -> p.toString().endsWith(".java"))::iterator) {
        sources.append(new String(Files.readAllBytes(f), StandardCharsets.UTF_8));
      }
    }
    Set<String> used = new TreeSet<>();
    Matcher m = Pattern.compile("KoilaNative(?:\\.|::)(koila_\\w+)").matcher(sources);
    while (m.find()) used.add(m.group(1));
    List<String> unused = declared().stream().filter(n -> !used.contains(n)).collect(Collectors.toList());
    assertEquals(List.of(), unused, "functions of koila.h the org.koila classes never call");
  }
}
