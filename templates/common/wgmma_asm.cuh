{# The accumulator operands of a wgmma asm statement, written once for every wrapper (wgmma.cuh,
   wgmma_rs.cuh, wgmma_fp8.cuh): acc_registers(n) lists "%0, %1, …" 16 to a line; acc_constraints(n)
   the matching "+f"(d[j]) outputs, 8 to a line, the first led by ':'. Imported: renders nothing itself. #}
{% macro acc_registers(n) %}
{% for i in range(0, n, 16) %}
        "{% for j in range(i, [i + 16, n] | min) %}%{{ j }}{{ ', ' if j + 1 < n else '' }}{% endfor %}"
{% endfor %}
{% endmacro %}
{% macro acc_constraints(n) %}
{% for i in range(0, n, 8) %}
        {{ ':' if i == 0 else ',' }} {% for j in range(i, [i + 8, n] | min) %}"+f"(d[{{ j }}]){{ ', ' if j % 8 != 7 and j + 1 < n else '' }}{% endfor %}

{% endfor %}
{% endmacro %}
